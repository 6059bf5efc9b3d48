"""The benchmark's parts: its options (benchmark_options), the FLOP model
(model_flops), the sweep over configurations (sweep), the device and its
peak (cpu_peak), the reports (reports, accuracy_reports), profile reading
(profiles), synthetic records (synthetic_data), the timing of programs run
as child processes (child_runs) and the benchmark programs' command lines
(benchmark_args)."""
