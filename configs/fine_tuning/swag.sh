# scripts/run_swag.sh's task (scripts/fine_tune.sh reads it): multiple choice
# with run_swag.py, by default on the bundled sample (sample_data/swag) and
# starting from the checkpoint of scripts/run_pre.sh; then the export
# (Hugging Face: BertForMultipleChoice).
PROGRAM=run_swag.py
STAGE_FLAGS=(--do_train --do_eval --do_predict)
WHAT='multiple choice on $DATA_DIR'
SUMMARY="Fine-tunes a multiple-choice model on train.csv, scores val.csv and
test.csv (eval_results.txt: accuracy and loss; the choice probabilities in
dev_results.tsv and test_results.tsv), then exports it to
\$OUTPUT_DIR/export."
PASSED_ON="e.g. --cpu_replicas=2 or the paper's SWAG settings
--flagfile=configs/swag/swag.flags."
EXAMPLE='scripts/$NAME WORK_DIR=/tmp/run1 DATA_DIR=/data/swag \
    --flagfile=configs/swag/swag.flags'
DONE='eval_results.txt, dev_results.tsv and test_results.tsv'

setting DATA_DIR '$REPO_ROOT/sample_data/swag' --data_dir \
  "SWAG's train.csv, val.csv, test.csv (or train.jsonl, dev.jsonl,
test.jsonl)" dir
default OUTPUT_DIR '$WORK_DIR/swag'
default MAX_SEQ_LENGTH 64
default TRAIN_BATCH_SIZE 16
default PREDICT_BATCH_SIZE 32
default LEARNING_RATE 2e-4
default NUM_TRAIN_EPOCHS 5
default SAVE_CHECKPOINTS_STEPS 100
