"""What every program at the repository's root does around its own work.

A program is its options dataclass and a function of them:

  if __name__ == "__main__":
    programs.main(ClassifierOptions, run)

`main` makes the flags from the options' fields (option_flags.py), parses
the command line (refusing what absl lets through: flag_parsing.py), builds
and checks the options, and calls `run(options)`; a UserError becomes one
`error:` line and exit 2 (errors.py). Before that, while TensorFlow is not
yet imported, it sets what TensorFlow's C++ runtime reads once when it
loads: its log level, its CPU kernels, XLA's CPU clustering.
"""

import os
import sys

from absl import app
from absl import flags

from bertkit.common import console
from bertkit.common import cpu_kernels
from bertkit.common import errors
from bertkit.common import flag_parsing
from bertkit.common import option_flags

flags.disclaim_key_flags()


def allow_xla_on_cpu():
  """Lets --use_xla's global_jit_level cluster CPU ops too.

  TensorFlow auto-clusters only GPU ops for XLA unless TF_XLA_FLAGS has
  --tf_xla_cpu_global_jit; without it --use_xla would silently do nothing on
  a CPU. The flag only widens what a session with global_jit_level ON_1
  compiles, so it changes nothing for runs without --use_xla. TensorFlow reads
  TF_XLA_FLAGS once, early, hence this runs before it is imported.
  """
  current = os.environ.get("TF_XLA_FLAGS", "")
  if "--tf_xla_cpu_global_jit" not in current.split():
    os.environ["TF_XLA_FLAGS"] = (current + " --tf_xla_cpu_global_jit").strip()


def prepare_process(argv):
  """What must happen before TensorFlow is imported: its C++ log level (from
  --verbosity in `argv`), oneDNN's kernels, XLA on CPUs."""
  console.quiet_native_logs(argv)
  cpu_kernels.prefer_onednn()
  allow_xla_on_cpu()


def main(options_class, run, passes_arguments=False):
  """Runs a program: flags from `options_class`, then `run(options)`.

  Args:
    options_class: the program's options dataclass.
    run: function(options) doing the program's work; its return value, when
      not None, is printed (create_vocab's summary line).
    passes_arguments: the program takes arguments after a lone `--` (the
      flags run_glue.py passes on): `run(options, arguments)`.
  """
  prepare_process(sys.argv)
  option_flags.define(options_class)

  def main_of_options(argv):
    options = option_flags.options_from_flags(options_class)
    said = run(options, argv[1:]) if passes_arguments else run(options)
    if said is not None:
      print(said)

  app.run(errors.main_with_user_errors(main_of_options),
          flags_parser=flag_parsing.parse_flags)
