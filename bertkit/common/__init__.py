"""Errors and the one-line error exit, atomic writes, console lines, input
globs and the CPU kernel choice: what every program needs, free of TensorFlow
at import time."""
