"""Regenerates the synthetic topic-classification sample (train/dev/test.tsv)
and its unlabelled transfer set (transfer.tsv: sentences of both topics, the
label column left empty, for distillation: docs/distillation.md).

Each sentence is about the weather or about cooking in the kitchen. Both
topics share the same people, places and times, so only the topic words tell
them apart: a model has to read the sentence, but a small one learns the task
in a few hundred steps. Every word also occurs in sample_data/corpus.txt, so
a vocab trained there by create_vocab.py covers the sample.

Usage (from the repository root; the output is deterministic):
  python sample_data/classify/make_data.py
"""

import os
import random

SEED = 20240601
SPLITS = (("train.tsv", 400), ("dev.tsv", 100), ("test.tsv", 100))
# Made after the splits, from the same generator: no sentence of theirs.
TRANSFER = ("transfer.tsv", 800)

PEOPLE = ("Tilda", "Jonas", "Thea", "Vera", "Walter", "Ruth", "Ada", "Wren",
          "Greta", "Felix", "Lena", "Arthur", "the teacher", "the old baker",
          "the family next door", "the neighbours")
PLACES = ("Greyhaven", "Thornbury", "Stillwell", "Saltmarsh", "Oakridge",
          "Ashford Green", "Harrowgate End", "Little Fenwick", "Hazelby",
          "Millbrook", "Westmere", "Lowater")
TIMES = ("in the morning", "every evening", "on Sunday", "in December",
         "after lunch", "before dawn", "last winter", "in the afternoon",
         "every week", "in September", "at night", "on Monday")

WEATHER = {
    "thing": ("the rain", "the snow", "the wind", "the frost", "the storm",
              "the fog", "the ice", "the clouds", "the sun", "the heavy rain",
              "a cold wind", "thick cloud"),
    "verb": ("arrived", "came in from the sea", "lasted for hours",
             "covered the hills", "moved slowly across the sky",
             "melted by noon", "rattled the doors", "fell overnight",
             "cleared before dawn", "rattled the windows"),
    "reading": ("the temperature", "the wind speed", "the weather records",
                "the weather diary", "the barometer readings"),
}
KITCHEN = {
    "thing": ("the bread", "the soup", "the cake", "the dough", "the loaf",
              "the stew", "the biscuits", "the sourdough", "the apple cake",
              "the honey cake", "fresh bread", "a pot of soup"),
    "verb": ("went into the oven", "was ready by noon", "needed more flour",
             "smelled of butter", "was left to rise", "was cut into slices",
             "was left to cool on the table", "had a taste of honey",
             "was cooked twice", "left the kitchen full of steam"),
    "reading": ("the recipe", "the oven", "the flour jar", "the recipe book",
                "the baking tray"),
}

TEMPLATES = (
    "{time} in {place}, {thing} {verb}.",
    "{person} said that {thing} {verb} {time}.",
    "In {place}, {thing} {verb} while {person} was watching.",
    "{person} checked {reading} {time}, and {thing} {verb}.",
    "Nobody in {place} expected that {thing} {verb} {time}.",
    "{person} wrote in a notebook that {thing} {verb}.",
    "{time}, {person} looked at {reading} before {thing} {verb}.",
    "According to {person}, {thing} in {place} {verb} {time}.",
)


def sentence(rng, words):
  """One sentence of a topic, with shared people, places and times."""
  text = rng.choice(TEMPLATES).format(
      person=rng.choice(PEOPLE), place=rng.choice(PLACES),
      time=rng.choice(TIMES), thing=rng.choice(words["thing"]),
      verb=rng.choice(words["verb"]), reading=rng.choice(words["reading"]))
  return text[0].upper() + text[1:]


def make_splits(rng, seen):
  """Distinct rows for every split: half of each topic, in shuffled order.

  Args:
    rng: the generator.
    seen: the sentences made so far; those made here are added.

  Returns:
    A list of (file name, [(sentence, label)]) in SPLITS order.
  """
  by_label = {}
  total = sum(size for _, size in SPLITS)
  for label, words in (("weather", WEATHER), ("kitchen", KITCHEN)):
    by_label[label] = []
    while len(by_label[label]) < total // 2:
      text = sentence(rng, words)
      if text not in seen:
        seen.add(text)
        by_label[label].append((text, label))
  splits, start = [], 0
  for name, size in SPLITS:
    rows = [row for label_rows in by_label.values()
            for row in label_rows[start // 2:(start + size) // 2]]
    rng.shuffle(rows)
    splits.append((name, rows))
    start += size
  return splits


def make_transfer(rng, seen):
  """TRANSFER's rows: new sentences, half of each topic, shuffled, each with
  an empty label."""
  rows = []
  for words in (WEATHER, KITCHEN):
    made = 0
    while made < TRANSFER[1] // 2:
      text = sentence(rng, words)
      if text not in seen:
        seen.add(text)
        rows.append((text, ""))
        made += 1
  rng.shuffle(rows)
  return rows


def main():
  rng = random.Random(SEED)
  out_dir = os.path.dirname(os.path.abspath(__file__))
  seen = set()
  splits = make_splits(rng, seen)
  for name, rows in splits + [(TRANSFER[0], make_transfer(rng, seen))]:
    with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n")
      for text, label in rows:
        f.write("%s\t%s\n" % (text, label))


if __name__ == "__main__":
  main()
