# scripts/run_classify.sh's task (scripts/fine_tune.sh reads it): step 3 of
# 3, fine-tuning with run_classifier.py, by default on the bundled sample task
# and starting from the checkpoint of scripts/run_pre.sh.
PROGRAM=run_classifier.py
STAGE_FLAGS=(--do_train --do_eval --do_predict)
WHAT='task $TASK_NAME'
SUMMARY="Fine-tunes a classifier, evaluates it on dev.tsv (eval_results.txt) and
predicts test.tsv (test_results.tsv), then exports the classifier to
\$OUTPUT_DIR/export."
PASSED_ON="e.g. --cpu_replicas=2, --labels=a,b or --nodo_predict."
EXAMPLE='scripts/$NAME WORK_DIR=/tmp/run1 INIT_CHECKPOINT= NUM_TRAIN_EPOCHS=10'
DONE='eval_results.txt and test_results.tsv'

setting TASK_NAME tsv --task_name \
  "a GLUE task (cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, ax),
xnli, tsv or rerank"
setting DATA_DIR '$REPO_ROOT/sample_data/classify' --data_dir \
  "the task's train/dev/test.tsv" dir
setting EVAL_BATCH_SIZE 8 --eval_batch_size "eval batch"
default OUTPUT_DIR '$WORK_DIR/classify'
default MAX_SEQ_LENGTH 64
default LEARNING_RATE 2e-4
default NUM_TRAIN_EPOCHS 5
default SAVE_CHECKPOINTS_STEPS 100
