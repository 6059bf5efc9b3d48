"""Regenerates the sample multiple-choice task (train.csv, val.csv, test.csv).

SWAG's layout, on sample_data/corpus.txt: each example is two consecutive
sentences of a corpus document. sent1 is the first; sent2 the first
START_WORDS words of the second; the right ending is the rest of the second
sentence, the three others the rest of sentences from other documents. A
model picks the ending that really follows. The columns are SWAG's
(video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..3,
label): video-id names the document, fold-ind the sentence.

Usage (from the repository root; the output is deterministic):
  python sample_data/swag/make_data.py
"""

import csv
import os
import random

SEED = 20261129
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus.txt")
# Each split's share of the documents and its most examples.
SPLITS = (("train.csv", 0.6, 480), ("val.csv", 0.2, 160),
          ("test.csv", 0.2, 160))
START_WORDS = 3
CHOICES = 4
HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2",
          "gold-source"] + ["ending%d" % i for i in range(CHOICES)] + ["label"]


def documents():
  docs, current = [], []
  with open(CORPUS, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        current.append(line.split())
      elif current:
        docs.append(current)
        current = []
  if current:
    docs.append(current)
  return docs


def rows(docs, numbers, limit, rng):
  """SWAG rows of the documents `numbers`, distractors from the others."""
  pairs = [(d, i) for d in numbers for i in range(len(docs[d]) - 1)
           if len(docs[d][i + 1]) > START_WORDS + 1]
  rng.shuffle(pairs)
  others = [(d, words) for d, doc in enumerate(docs) for words in doc
            if len(words) > START_WORDS + 1]
  out = []
  for d, i in pairs[:limit]:
    follow = docs[d][i + 1]
    endings = [" ".join(follow[START_WORDS:])]
    while len(endings) < CHOICES:
      other, words = rng.choice(others)
      ending = " ".join(words[START_WORDS:])
      if other != d and ending not in endings:
        endings.append(ending)
    label = rng.randrange(CHOICES)
    endings[0], endings[label] = endings[label], endings[0]
    sent1, sent2 = " ".join(docs[d][i]), " ".join(follow[:START_WORDS])
    out.append(["doc%d" % d, str(i), sent1 + " " + sent2, sent1, sent2,
                "gold"] + endings + [str(label)])
  return out


def main():
  rng = random.Random(SEED)
  docs = documents()
  order = list(range(len(docs)))
  rng.shuffle(order)
  start = 0
  for name, share, limit in SPLITS:
    end = start + round(share * len(docs))
    with open(os.path.join(HERE, name), "w", encoding="utf-8",
              newline="") as f:
      writer = csv.writer(f)
      writer.writerow(HEADER)
      writer.writerows(rows(docs, order[start:end], limit, rng))
    start = end


if __name__ == "__main__":
  main()
