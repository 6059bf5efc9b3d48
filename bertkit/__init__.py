"""The library behind the programs at the repository root.

The root holds what a user runs (run_pretraining.py, create_pretraining_data.py,
run_classifier.py, run_glue.py, run_squad.py, run_ner.py, run_swag.py,
run_rerank.py, run_bm25.py,
export_checkpoint.py, create_vocab.py, extract_features.py, benchmark.py,
two_phase.py) and upstream's three API modules (modeling.py, optimization.py,
tokenization.py), importable as `import modeling` as with google-research/bert.
Everything else lives here: the model's kernels (kernels.py: the ops with
hand-written gradients modeling builds BERT from), and one subpackage per
concern:

  common   errors and the one-line error exit, atomic writes, console lines,
           input globs, user text decoded as UTF-8, the CPU kernel choice
  data     corpus reading, pretraining instances, TFRecord features and
           files, sharded data creation, packing, the fast tokenizer, the
           one pair encoder
  engine   the training runner and what it is made of: set-up, the precision
           record, distribution and the cluster environment, horovod and
           BytePS, hooks, throughput, checkpoints and their formats, the
           input pipeline and the checks of its records, dynamic masking,
           the optimizers and the training update, the train step,
           preemption
  tasks    what the runner runs: pretraining (heads, losses, metrics), the
           classifier (data processors, features, head, outputs), the GLUE
           tasks and suite, SQuAD
           (data, features, predictions, evaluation, head), named entities
           (token classification), multiple choice (SWAG), passage
           re-ranking (MS MARCO's files, MRR@10, BM25), what the
           fine-tuning tasks share, and feature extraction (token features,
           sentence pooling)
  perf     the benchmark's FLOP model, sweep, probes and reports

Rules (tests/common/test_layout.py enforces them):
  1. Imports point down. Layers, lowest first: common; tokenization,
     modeling and kernels; data; engine; tasks and optimization (upstream's
     names for engine.update.optimizers); perf; programs. A module imports only
     from its own layer or a lower one, and never a program.
  2. `bertkit.common` and `bertkit.data` import no TensorFlow at import time
     (data creation and create_vocab start in well under a second and their
     worker processes stay small); where they need TensorFlow they import it
     inside the function that does.
  3. At most 20 Python files at the root, none of them a library module.
  4. Module-level state lives only in modules whose docstring says who writes
     it and who reads it, in a paragraph beginning `Module state:`
     (engine.loop.preemption's signal flag, engine.distributed.distribution's
     process group, engine.distributed.horovod_engine's and
     engine.distributed.byteps_engine's handles; the caches of
     engine.checkpointing.checkpoint_formats, data.pretraining_records,
     data.tfrecord_files and data.shard_task). State is a name a function
     rebinds through `global`, or a container bound at import that a function
     changes.
"""
