"""Every head the toolkit trains, and the variables that hold it.

One table, read by the tasks that build the heads (bertkit/tasks), by the
fine-tuning driver's check that an evaluated checkpoint holds its task's
head, and by the checkpoint formats (engine/checkpointing/checkpoint_formats.py:
export, detection of a checkpoint's head, Hugging Face's names).
TensorFlow-free, so that it sits below all of them.
"""

import dataclasses
from typing import Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Head:
  """One head on top of BERT's encoder.

  Attributes:
    name: what the toolkit calls it (export_checkpoint's messages, the
      checkpoint formats' tables).
    variables: the names of its own variables in our checkpoints, outputs
      first; a checkpoint holding them all holds this head.
    hf_architecture: Hugging Face transformers' class of the same model.
    labelled: its outputs are named classes (labels.txt, id2label).
    program: the program that trains it.
  """
  name: str
  variables: Tuple[str, ...]
  hf_architecture: str
  labelled: bool = False
  program: Optional[str] = None


PRETRAINING = Head("pretraining",
                   ("cls/seq_relationship/output_weights",
                    "cls/seq_relationship/output_bias",
                    "cls/predictions/output_bias"),
                   "BertForPreTraining", program="run_pretraining.py")
# Pretrained without next-sentence prediction: the masked-LM head alone.
MASKED_LM = Head("masked_lm", ("cls/predictions/output_bias",),
                 "BertForMaskedLM", program="run_pretraining.py")
# Upstream's classifier keeps its variables at the top level, so that its
# checkpoints stay interchangeable with upstream's.
CLASSIFIER = Head("classifier", ("output_weights", "output_bias"),
                  "BertForSequenceClassification", labelled=True,
                  program="run_classifier.py")
SQUAD = Head("squad", ("cls/squad/output_weights", "cls/squad/output_bias"),
             "BertForQuestionAnswering", program="run_squad.py")
# Scoped, so that neither is taken for the sentence classifier's top-level
# output_weights.
TOKEN_CLASSIFICATION = Head(
    "token_classification", ("cls/token_classification/output_weights",
                             "cls/token_classification/output_bias"),
    "BertForTokenClassification", labelled=True, program="run_ner.py")
MULTIPLE_CHOICE = Head(
    "multiple_choice", ("cls/multiple_choice/output_weights",
                        "cls/multiple_choice/output_bias"),
    "BertForMultipleChoice", program="run_swag.py")
# Nogueira and Cho's passage re-ranker with one output: the relevance logit
# of a query/passage pair (Hugging Face: BertForSequenceClassification with
# num_labels=1). Scoped, so that it is not taken for an STS-B regression
# head of run_classifier.
RERANKER = Head("reranker", ("cls/reranker/output_weights",
                             "cls/reranker/output_bias"),
                "BertForSequenceClassification", program="run_rerank.py")
# No head: the encoder and its pooler (a Hugging Face BertModel, e.g. a
# sentence-transformers model).
ENCODER = Head("encoder", (), "BertModel")

# In the order a checkpoint's head is recognised: a head whose output
# variable is there wins over those after it (a pretraining checkpoint also
# holds the masked LM's bias; every checkpoint has an encoder).
HEADS = (PRETRAINING, SQUAD, TOKEN_CLASSIFICATION, MULTIPLE_CHOICE,
         RERANKER, CLASSIFIER, MASKED_LM, ENCODER)
BY_NAME = {head.name: head for head in HEADS}


def missing_variables(head, variable_names):
  """The variables of `head` that a checkpoint holding `variable_names`
  lacks, in the head's order."""
  return [name for name in head.variables if name not in variable_names]


def detect(variable_names):
  """The head a checkpoint holding `variable_names` holds: the first of
  HEADS whose output variable (its first) is there (ENCODER for an encoder
  alone), or None when there is not even an encoder."""
  for head in HEADS[:-1]:
    if head.variables[0] in variable_names:
      return head
  if "bert/embeddings/word_embeddings" in variable_names:
    return ENCODER
  return None
