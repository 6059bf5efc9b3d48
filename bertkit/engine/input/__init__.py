"""The training input: TFRecord input functions (input_pipeline.py), the
checks of their records (record_checks.py), masks drawn in the pipeline
(dynamic_masking.py)."""
