"""What every program needs, free of TensorFlow at import time: options
declared once with their flags (option_fields, option_flags, options,
programs), the table of heads, errors and the one-line error exit, atomic
writes, user text decoded, console lines, input globs and the CPU kernel
choice."""
