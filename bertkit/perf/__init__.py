"""The benchmark's parts: the FLOP model, the sweep over configurations, the
CPU peak probe, synthetic records and the reports."""
