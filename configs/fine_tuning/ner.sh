# scripts/run_ner.sh's task (scripts/fine_tune.sh reads it): named entities
# with run_ner.py, by default on the bundled sample (sample_data/ner) and
# starting from the checkpoint of scripts/run_pre.sh; then the export
# (Hugging Face: BertForTokenClassification).
PROGRAM=run_ner.py
STAGE_FLAGS=(--do_train --do_eval --do_predict)
WHAT='named entities on $DATA_DIR'
SUMMARY="Fine-tunes a named-entity tagger on train.txt, scores dev.txt and test.txt
(eval_results.txt: seqeval's entity precision, recall and F1; the tags in
dev_predictions.txt and test_predictions.txt), then exports it to
\$OUTPUT_DIR/export."
PASSED_ON="e.g. --cpu_replicas=2, --labels=O,B-PER,I-PER or the paper's
CoNLL-2003 settings --flagfile=configs/ner/conll2003.flags."
EXAMPLE='scripts/$NAME WORK_DIR=/tmp/run1 DATA_DIR=/data/conll2003 \
    --flagfile=configs/ner/conll2003.flags'
DONE='eval_results.txt, dev_predictions.txt and test_predictions.txt'

setting DATA_DIR '$REPO_ROOT/sample_data/ner' --data_dir \
  "train.txt, dev.txt, test.txt (or CoNLL-2003's eng.train, eng.testa,
eng.testb)" dir
default OUTPUT_DIR '$WORK_DIR/ner'
default MAX_SEQ_LENGTH 64
default PREDICT_BATCH_SIZE 32
default LEARNING_RATE 2e-4
default NUM_TRAIN_EPOCHS 5
default SAVE_CHECKPOINTS_STEPS 100
