# coding=utf-8
"""Compares sentence segmenters for JSONL/Parquet input (docs/benchmarks_data.md).

Run: python benchmarks/segmenters.py [TEXT_FILE]

Two measures per library:
  * accuracy on SAMPLES, paragraphs with abbreviations, decimals, quotes,
    initials, URLs and ellipses whose correct sentences are written out
    (a sample counts only if every boundary is right);
  * speed on TEXT_FILE (default sample_data/corpus.txt): its documents
    (blank-line separated) joined into one paragraph each, segmented
    whole, best of 3 runs, in MB of text per second.

Libraries missing from the environment are skipped.
"""

import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import text_files
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs

# (paragraph, its sentences).
SAMPLES = [
    ("Dr. Smith arrived at 3 p.m. on Monday. He left early.",
     ["Dr. Smith arrived at 3 p.m. on Monday.", "He left early."]),
    ("Mr. and Mrs. Brown live on Baker St. near the park. They have a dog.",
     ["Mr. and Mrs. Brown live on Baker St. near the park.",
      "They have a dog."]),
    ("The price rose 3.5 percent to $12.75 a share. Analysts expected 2.1.",
     ["The price rose 3.5 percent to $12.75 a share.",
      "Analysts expected 2.1."]),
    ('"Where are you going?" she asked. "Home," he said.',
     ['"Where are you going?" she asked.', '"Home," he said.']),
    ("He said, \u201cIt is over.\u201d Then he walked away.",
     ["He said, \u201cIt is over.\u201d", "Then he walked away."]),
    ("The U.S. economy grew in 2019. Growth slowed in 2020.",
     ["The U.S. economy grew in 2019.", "Growth slowed in 2020."]),
    ("J. R. R. Tolkien wrote The Hobbit. It was published in 1937.",
     ["J. R. R. Tolkien wrote The Hobbit.", "It was published in 1937."]),
    ("Version 2.0.1 fixes the bug, e.g. the crash on start. Update now!",
     ["Version 2.0.1 fixes the bug, e.g. the crash on start.", "Update now!"]),
    ("See www.example.com for details. The site is free.",
     ["See www.example.com for details.", "The site is free."]),
    ("Wait... what happened? Nobody knows.",
     ["Wait... what happened?", "Nobody knows."]),
    ("It weighs approx. 4 kg. Handle it with care.",
     ["It weighs approx. 4 kg.", "Handle it with care."]),
    ("The meeting is at 10 a.m. tomorrow. Bring the report, i.e. the draft.",
     ["The meeting is at 10 a.m. tomorrow.",
      "Bring the report, i.e. the draft."]),
]


def blingfire_split():
  import blingfire  # pylint: disable=g-import-not-at-top
  return lambda text: [s for s in blingfire.text_to_sentences(text).split(
      "\n") if s.strip()]


def syntok_split():
  from syntok import segmenter  # pylint: disable=g-import-not-at-top
  def split(text):
    return ["".join(t.spacing + t.value for t in sentence).strip()
            for paragraph in segmenter.process(text)
            for sentence in paragraph]
  return split


def pysbd_split():
  import pysbd  # pylint: disable=g-import-not-at-top
  segmenter = pysbd.Segmenter(language="en", clean=False)
  return lambda text: [s.strip() for s in segmenter.segment(text)
                       if s.strip()]


LIBRARIES = {"blingfire": blingfire_split, "syntok": syntok_split,
             "pysbd": pysbd_split}


def paragraphs_of(path):
  with text_files.open_text(path) as f:
    text = f.read()
  return [" ".join(line.strip() for line in block.splitlines())
          for block in text.split("\n\n") if block.strip()]


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("text_file", nargs="?", type=benchmark_args.existing_file,
                      default=os.path.join(REPO_ROOT, "sample_data",
                                           "corpus.txt"),
                      help="the speed text (default: sample_data/corpus.txt)")
  return parser.parse_args(argv)


def main(args):
  path = args.text_file
  paragraphs = paragraphs_of(path)
  num_bytes = sum(len(p.encode("utf-8")) for p in paragraphs)
  print("speed text: %s, %d paragraphs, %.2f MB" % (
      path, len(paragraphs), num_bytes / 1e6))
  for name, make in LIBRARIES.items():
    try:
      split = make()
    except ImportError:
      print("%-10s not installed" % name)
      continue
    wrong = [text for text, expected in SAMPLES
             if [s.strip() for s in split(text)] != expected]
    best = float("inf")
    for _ in range(3):
      start = time.perf_counter()
      for paragraph in paragraphs:
        split(paragraph)
      best = min(best, time.perf_counter() - start)
    print("%-10s samples right %2d/%d  speed %7.2f MB/s" % (
        name, len(SAMPLES) - len(wrong), len(SAMPLES), num_bytes / 1e6 / best))
    for text in wrong:
      print("   wrong: %r -> %r" % (text, split(text)))


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
