"""Checkpoints: --init_checkpoint, resuming and the periodic saver
(checkpoints.py), our variable names in Hugging Face's and the head a
checkpoint holds (checkpoint_formats.py), the model a run directory
describes (run_directory.py)."""
