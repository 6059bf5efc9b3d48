"""From text to TFRecords: corpus reading, pretraining instances, record
features, TFRecord files, sharded creation, packing and the fast tokenizer;
free of TensorFlow at import time."""
