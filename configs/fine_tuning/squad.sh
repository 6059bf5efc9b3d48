# scripts/run_squad.sh's task (scripts/fine_tune.sh reads it): SQuAD 1.1 or
# 2.0 with run_squad.py (--do_train --do_predict), by default on the
# repository's small hand-made SQuAD file and starting from the checkpoint of
# scripts/run_pre.sh.
PROGRAM=run_squad.py
STAGE_FLAGS=(--do_train --do_predict)
WHAT='on $TRAIN_FILE'
SUMMARY="Fine-tunes on a SQuAD training file, predicts a SQuAD file
(predictions.json, nbest_predictions.json, null_odds.json for 2.0) and, when
it has answers, evaluates it (exact match and F1 in eval_results.txt), then
exports the model to \$OUTPUT_DIR/export."
PASSED_ON="e.g. --cpu_replicas=2, --null_score_diff_threshold=-2 or
--nodo_train."
EXAMPLE='scripts/$NAME TRAIN_FILE=$SQUAD_DIR/train-v2.0.json \
    PREDICT_FILE=$SQUAD_DIR/dev-v2.0.json VERSION_2_WITH_NEGATIVE=true \
    VOCAB_FILE=$BERT/vocab.txt BERT_CONFIG_FILE=$BERT/bert_config.json \
    INIT_CHECKPOINT=$BERT/bert_model.ckpt MAX_SEQ_LENGTH=384 \
    DOC_STRIDE=128 MAX_QUERY_LENGTH=64 TRAIN_BATCH_SIZE=24 \
    LEARNING_RATE=3e-5 NUM_TRAIN_EPOCHS=2 --multi_gpu
  (SQuAD 2.0 with a Google model)'
DONE='predictions.json (and eval_results.txt when $PREDICT_FILE has answers)'

setting TRAIN_FILE '$REPO_ROOT/tests/fixtures/squad/squad_v1.json' \
  --train_file "SQuAD json to train on, e.g. train-v1.1.json (the default
holds 23 hand-made questions: a smoke run)" file
setting PREDICT_FILE '$TRAIN_FILE' --predict_file \
  "SQuAD json to predict, e.g. dev-v1.1.json" file
setting VERSION_2_WITH_NEGATIVE false --version_2_with_negative \
  "true for SQuAD 2.0 files"
setting DOC_STRIDE 64 --doc_stride "tokens between window starts (upstream: 128)"
setting MAX_QUERY_LENGTH 32 --max_query_length \
  "question tokens kept (upstream: 64)"
default OUTPUT_DIR '$WORK_DIR/squad'
default MAX_SEQ_LENGTH 128
