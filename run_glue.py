# coding=utf-8
"""GLUE over a checkpoint: fine-tunes every GLUE task and writes the table.

Starts one run_classifier.py process per (task, seed) on the official GLUE
download and writes, in --output_dir:

  <task>/seed_<k>/      run_classifier's --output_dir of seed k
                        (--tf_random_seed=k) and run_classifier.log, its
                        console output;
  ax/                   with --do_predict: AX predicted by the median MNLI
                        run;
  glue_results.md/.csv/.json  per task its dev-set metrics per seed, their
                        medians and its score; the GLUE score
                        (bertkit/tasks/glue/suite.py says how it is
                        computed);
  submission/           with --do_predict: the leaderboard's files (CoLA.tsv,
                        ..., MNLI-m.tsv, MNLI-mm.tsv, ..., AX.tsv), each from
                        its task's median run.

Each task's learning rate, epochs, batch and sequence length come from
--task_flags_dir/<task>.flags (configs/glue: the BERT paper's defaults).
Arguments after `--` go to every run_classifier.py process and win over the
flagfile, e.g. `-- --num_train_epochs=2 --use_fp16`.

Runs go one after another on a CPU, and in parallel over the GPUs when there
are several (one run per GPU, CUDA_VISIBLE_DEVICES set per process; the GPUs
are CUDA_VISIBLE_DEVICES's if set, else those `nvidia-smi -L` lists). A rerun
skips the runs whose eval_results.json exists and completes the others.
What every run would refuse (a missing file or GLUE folder, an
--init_checkpoint without a checkpoint, a checkpoint whose directory holds no
config or vocab without --bert_config_file or --vocab_file) is refused before
the first run: one `error:` line, exit 2, nothing written. A failing run is
named with its exit code and log; the suite goes on with the others, writes
the table of what finished and exits with 3.

Its options (flags): bertkit/tasks/glue/options.py; the runs:
bertkit/tasks/glue/suite_runner.py, planned and read by suite.py.

Example:
  python run_glue.py --init_checkpoint=/tmp/pretrain \
    --bert_config_file=configs/bert_base.json --vocab_file=vocab.txt \
    --glue_dir=/data/glue_data --output_dir=/tmp/glue --seeds=5 --do_predict
"""

from bertkit.common import programs
from bertkit.tasks.glue.options import GlueSuiteOptions


def run(opts, extra_flags):
  """Runs the GLUE suite `opts` (GlueSuiteOptions) ask for; `extra_flags`
  (the arguments after `--`) go to every run_classifier.py."""
  from bertkit.tasks.glue import suite_runner  # pylint: disable=g-import-not-at-top
  suite_runner.run(opts, extra_flags)


if __name__ == "__main__":
  programs.main(GlueSuiteOptions, run, passes_arguments=True)
