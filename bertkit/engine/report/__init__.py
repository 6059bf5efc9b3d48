"""What a run reports: examples/sec to the console, TensorBoard and
throughput.jsonl (throughput.py); eval_results.txt and the run summary on
stdout (run_summary.py)."""
