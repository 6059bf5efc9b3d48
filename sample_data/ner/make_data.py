"""Regenerates the sample named-entity task (train.txt, dev.txt, test.txt).

The sentences are sample_data/corpus.txt's, as written; the entities are
the names of a fixed list (people and pets as PER, towns, villages, hills
and rivers as LOC, days and months as MISC), tagged wherever they occur.
The files are CoNLL-2003's layout as distributed: `-DOCSTART-` before each
corpus document, a blank line after each sentence, `token POS chunk NER`
columns and IOB1 tags (I-TYPE unless an entity follows one of the same
type). The POS and chunk columns are placeholders (NNP for a capitalised
word, CD for a number, the token for punctuation, else NN; I-NP or O):
run_ner.py reads the first and last columns only.

Usage (from the repository root; the output is deterministic):
  python sample_data/ner/make_data.py
"""

import os
import random
import re

SEED = 20261129
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus.txt")
# Each split's share of the corpus documents; sentences without an entity
# are kept one time in KEEP_PLAIN.
SPLITS = (("train.txt", 0.6), ("dev.txt", 0.2), ("test.txt", 0.2))
KEEP_PLAIN = 8

ENTITIES = {
    "PER": ("Edith", "Tilda", "Desmond", "Bram", "Ruth", "Nils", "Felix",
            "Samir", "Farid", "Silas", "Elsie", "Agnes", "Yusuf", "Pepper",
            "Moss", "Bellamy"),
    "LOC": ("Ashford Green", "Little Fenwick", "Harrowgate End", "Black Tor",
            "Cobble Hill", "Brackenmoor", "Pebbleford", "Kingsditch",
            "Saltmarsh", "Hazelby", "Oakridge", "Stillwell", "Millbrook",
            "Westmere", "Thornbury", "Ashdown", "Greyhaven", "Harrowgate",
            "Loddon", "Carrow", "Tamble"),
    "MISC": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
             "Saturday", "Sunday", "January", "February", "April", "June",
             "July", "August", "September", "October", "November",
             "December", "Christmas"),
}
WORD = re.compile(r"\d+(?:[.,]\d+)*|\w+(?:'\w+)*|[^\w\s]")


def documents():
  """The corpus's documents: lists of sentences, blank-line separated."""
  docs, current = [], []
  with open(CORPUS, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        current.append(WORD.findall(line))
      elif current:
        docs.append(current)
        current = []
  if current:
    docs.append(current)
  return docs


def iob1_tags(words):
  """Each word's IOB1 tag under ENTITIES (longest name first)."""
  names = sorted(((name.split(), kind) for kind, names in ENTITIES.items()
                  for name in names), key=lambda n: -len(n[0]))
  tags, i, previous = ["O"] * len(words), 0, None
  while i < len(words):
    for parts, kind in names:
      if words[i:i + len(parts)] == parts:
        first = "B-" if previous == kind else "I-"
        tags[i:i + len(parts)] = [first + kind] + ["I-" + kind] * (
            len(parts) - 1)
        previous, i = kind, i + len(parts)
        break
    else:
      previous, i = None, i + 1
  return tags


def columns(word):
  if word[0].isdigit():
    return "CD", "I-NP"
  if not word[0].isalnum():
    return word, "O"
  return ("NNP" if word[0].isupper() else "NN"), "I-NP"


def write(path, docs, rng):
  with open(path, "w", encoding="utf-8") as f:
    for doc in docs:
      kept = [(words, iob1_tags(words)) for words in doc]
      kept = [(w, t) for w, t in kept
              if set(t) != {"O"} or rng.randrange(KEEP_PLAIN) == 0]
      if not kept:
        continue
      f.write("-DOCSTART- -X- -X- O\n\n")
      for words, tags in kept:
        for word, tag in zip(words, tags):
          f.write("%s %s %s %s\n" % ((word,) + columns(word) + (tag,)))
        f.write("\n")


def main():
  rng = random.Random(SEED)
  docs = documents()
  rng.shuffle(docs)
  start = 0
  for name, share in SPLITS:
    end = start + round(share * len(docs))
    write(os.path.join(HERE, name), docs[start:end], rng)
    start = end


if __name__ == "__main__":
  main()
