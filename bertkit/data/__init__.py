"""From text to TFRecords: corpus reading, pretraining instances, record
features, sharded creation, packing and the fast tokenizer; free of TensorFlow
at import time."""
