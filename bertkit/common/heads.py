"""Every head the toolkit trains, and the variables that hold it.

One table, HEADS, read by the tasks that build the heads (bertkit/tasks),
by the fine-tuning driver's check that an evaluated checkpoint holds its
task's head, and by the checkpoint formats
(engine/checkpointing/checkpoint_formats.py: the weight table, detection of
a checkpoint's head, Hugging Face's names and config) and
export_checkpoint.py (labels, the SavedModel's signature). Each of them
reads a head's fields and none names a head: a new head is one entry here.
TensorFlow-free, so that it sits below all of them.
"""

import dataclasses
from typing import Callable, Optional, Tuple

# A Weight's shape is given in these sizes: the model's hidden size H and
# vocabulary size V (BertConfig's fields), and the head's outputs C.
HIDDEN, VOCAB, OUTPUTS = "H", "V", "C"


@dataclasses.dataclass(frozen=True)
class Weight:
  """One variable of a head, in our checkpoints and in Hugging Face's class.

  Attributes:
    name: its name in our checkpoints.
    hf_name: the parameter Hugging Face's class holds it as.
    shape: its shape in sizes: ints, HIDDEN, VOCAB or OUTPUTS.
    transpose: Hugging Face's array is ours transposed (a TF dense layer's
      kernel [in, out] against torch.nn.Linear's weight [out, in]).
  """
  name: str
  hf_name: str
  shape: Tuple
  transpose: bool = False


def output_layer(scope, hf_layer):
  """The weights [C, H] and bias [C] of a head's output layer, named
  `<scope>output_weights` and `<scope>output_bias` here and
  `<hf_layer>.weight`, `<hf_layer>.bias` by Hugging Face.

  The weights are used as matmul(x, w^T): already torch's [out, in].
  """
  return (Weight(scope + "output_weights", hf_layer + ".weight",
                 (OUTPUTS, HIDDEN)),
          Weight(scope + "output_bias", hf_layer + ".bias", (OUTPUTS,)))


def _transform(scope, hf_scope):
  return (Weight(scope + "/dense/kernel", hf_scope + ".dense.weight",
                 (HIDDEN, HIDDEN), transpose=True),
          Weight(scope + "/dense/bias", hf_scope + ".dense.bias", (HIDDEN,)),
          Weight(scope + "/LayerNorm/gamma", hf_scope + ".LayerNorm.weight",
                 (HIDDEN,)),
          Weight(scope + "/LayerNorm/beta", hf_scope + ".LayerNorm.bias",
                 (HIDDEN,)))


# The masked LM: its output bias, then the transform before the decoder.
# The decoder's weight is the word embedding table (tied in both models);
# Hugging Face keeps the bias as cls.predictions.bias and ties
# cls.predictions.decoder.bias to it.
_MASKED_LM_WEIGHTS = (
    (Weight("cls/predictions/output_bias", "cls.predictions.bias", (VOCAB,)),)
    + _transform("cls/predictions/transform", "cls.predictions.transform"))


def _sequence_classification_config(labels):
  # One output is a regression head (STS-B).
  return {"problem_type": "regression" if len(labels) == 1
          else "single_label_classification"}


def _one_logit_config(labels):
  # BertForSequenceClassification with num_labels=1 (its num_labels is
  # len(id2label)): sentence-transformers' CrossEncoder turns the logit into
  # sigmoid(logit) in predict.
  del labels
  return {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}


@dataclasses.dataclass(frozen=True)
class Head:
  """One head on top of BERT's encoder.

  Attributes:
    name: what the toolkit calls it (export_checkpoint's messages).
    weights: its own variables (Weight), outputs first; a checkpoint
      holding them all holds this head, and one holding the first holds no
      head after it in HEADS.
    hf_architecture: Hugging Face transformers' class of the same model.
    outputs: C, its number of outputs; None: the checkpoint's (the rows of
      its first weight), for a labelled head.
    labelled: its outputs are named classes (labels.txt, id2label).
    program: the program that trains it.
    hf_pooler: Hugging Face's class has the pooler (our models always
      have one: modeling.BertModel builds it).
    hf_reads_back: a Hugging Face model of its class is read as this head
      (False where another head shares the class and is read instead).
    hf_config_fields: function(labels) -> the config.json fields Hugging
      Face's class needs beyond the shared ones and the labels' id2label.
    input_rank: the rank of the SavedModel's int32 inputs: 2 for [B, S],
      3 for [B, C, S] (one sequence per choice).
    serving: "module:function" building its SavedModel outputs,
      function(bert_config, input_ids, input_mask, segment_ids, num_labels)
      -> {name: tensor}; None: the encoder's pooled_output [B, H] and
      sequence_output [B, S, H].
  """
  name: str
  weights: Tuple[Weight, ...]
  hf_architecture: str
  outputs: Optional[int] = None
  labelled: bool = False
  program: Optional[str] = None
  hf_pooler: bool = True
  hf_reads_back: bool = True
  hf_config_fields: Optional[Callable] = None
  input_rank: int = 2
  serving: Optional[str] = None

  @property
  def variables(self):
    """The names of its variables in our checkpoints, outputs first."""
    return tuple(weight.name for weight in self.weights)


PRETRAINING = Head(
    "pretraining",
    output_layer("cls/seq_relationship/", "cls.seq_relationship")
    + _MASKED_LM_WEIGHTS,
    "BertForPreTraining", outputs=2, program="run_pretraining.py")
# Pretrained without next-sentence prediction: the masked-LM head alone.
MASKED_LM = Head("masked_lm", _MASKED_LM_WEIGHTS, "BertForMaskedLM",
                 program="run_pretraining.py", hf_pooler=False)
# Upstream's classifier keeps its variables at the top level, so that its
# checkpoints stay interchangeable with upstream's.
CLASSIFIER = Head(
    "classifier", output_layer("", "classifier"),
    "BertForSequenceClassification", labelled=True,
    program="run_classifier.py",
    hf_config_fields=_sequence_classification_config,
    serving="bertkit.tasks.classification.task:serving_outputs")
# [2, H]: row 0 gives the start logits, row 1 the end logits, as in
# qa_outputs (a Linear(H, 2)) split into start and end.
SQUAD = Head("squad", output_layer("cls/squad/", "qa_outputs"),
             "BertForQuestionAnswering", outputs=2, program="run_squad.py",
             hf_pooler=False,
             serving="bertkit.tasks.squad.model:serving_outputs")
# Scoped, so that neither is taken for the sentence classifier's top-level
# output_weights. Hugging Face calls each of their layers "classifier": the
# class a config names says whose it is.
TOKEN_CLASSIFICATION = Head(
    "token_classification",
    output_layer("cls/token_classification/", "classifier"),
    "BertForTokenClassification", labelled=True, program="run_ner.py",
    hf_pooler=False, serving="bertkit.tasks.ner.task:serving_outputs")
MULTIPLE_CHOICE = Head(
    "multiple_choice", output_layer("cls/multiple_choice/", "classifier"),
    "BertForMultipleChoice", outputs=1, program="run_swag.py", input_rank=3,
    serving="bertkit.tasks.swag.task:serving_outputs")
# Nogueira and Cho's passage re-ranker with one output: the relevance logit
# of a query/passage pair (Hugging Face: BertForSequenceClassification with
# num_labels=1, which reads back as run_classifier's head). Scoped, so that
# it is not taken for an STS-B regression head of run_classifier.
RERANKER = Head(
    "reranker", output_layer("cls/reranker/", "classifier"),
    "BertForSequenceClassification", outputs=1, program="run_rerank.py",
    hf_reads_back=False, hf_config_fields=_one_logit_config,
    serving="bertkit.tasks.reranking.task:serving_outputs")
# No head: the encoder and its pooler (a Hugging Face BertModel, e.g. a
# sentence-transformers model).
ENCODER = Head("encoder", (), "BertModel")

# In the order a checkpoint's head is recognised: a head whose output
# variable is there wins over those after it (a pretraining checkpoint also
# holds the masked LM's bias; every checkpoint has an encoder).
HEADS = (PRETRAINING, SQUAD, TOKEN_CLASSIFICATION, MULTIPLE_CHOICE,
         RERANKER, CLASSIFIER, MASKED_LM, ENCODER)


def missing_variables(head, variable_names):
  """The variables of `head` that a checkpoint holding `variable_names`
  lacks, in the head's order."""
  return [name for name in head.variables if name not in variable_names]


def detect(variable_names):
  """The head a checkpoint holding `variable_names` holds: the first of
  HEADS whose output variable (its first) is there (ENCODER for an encoder
  alone), or None when there is not even an encoder."""
  for head in HEADS:
    if head.weights and head.variables[0] in variable_names:
      return head
  if "bert/embeddings/word_embeddings" in variable_names:
    return ENCODER
  return None
