"""Helpers the test modules share, one module per concern; test modules import
them from here and never from each other (tests/common/test_layout.py)."""
