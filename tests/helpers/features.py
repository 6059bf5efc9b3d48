"""extract_features.py's test input: the sentences, a vocab that covers them,
and the values of its JSON lines."""

import numpy as np


# Unique tokens only: upstream's and bert-tensorflow's vocab readers differ
# on a repeated token (last line against first), which real vocabs lack.
WORDS = ("the cat sat on mat hello world is it not jack ##son ##ville ? . , "
         "! and of to in that was he she they we you my your dog happy at "
         "all said").split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"
LINES = ["The cat sat on the mat.",
         "Hello world ||| is it jacksonville?",
         "",
         "the dog and the cat sat on my mat and the dog was not happy at "
         "all, they said, and she said it was not.",
         "École ||| Zoë",
         "you ||| the dog and the cat sat on my mat and the dog was not happy"]


def write_vocab(path, size):
  """A vocab of `size` unique tokens: specials, WORDS, letters, unused."""
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
  tokens += [c for c in LETTERS if c not in tokens]
  tokens += ["##" + c for c in LETTERS]
  tokens += ["[unused%d]" % i for i in range(size - len(tokens))]
  assert len(set(tokens)) == len(tokens) == size
  with open(path, "w") as f:
    f.write("\n".join(tokens) + "\n")
  return str(path)


def values(line):
  """[tokens, layers, H] of one JSON line."""
  return np.array([[layer["values"] for layer in token["layers"]]
                   for token in line["features"]])
