# scripts/run_rerank.sh's task (scripts/fine_tune.sh reads it): MS MARCO
# passage re-ranking, by default on the bundled sample (sample_data/msmarco)
# and starting from the checkpoint of scripts/run_pre.sh. Before the program,
# BM25 (run_bm25.py) makes the candidates when DATA_DIR has no
# top1000.dev.tsv; run_rerank.py trains on the triples and re-ranks them;
# then the export (Hugging Face: BertForSequenceClassification, one label)
# and one line each for BM25 (or top1000's first stage) and BM25 + BERT:
# MRR@10 and the MS MARCO run file.
PROGRAM=run_rerank.py
STAGE_FLAGS=(--do_train --do_eval)
WHAT='the queries of $QRELS'
SUMMARY="BM25 over \$DATA_DIR/collection.tsv for queries.dev.small.tsv (unless
DATA_DIR holds top1000.dev.tsv), then fine-tunes a re-ranker on
triples.train.small.tsv, re-ranks the candidates and reports MRR@10 of both
(rerank_results.json), then exports it to \$OUTPUT_DIR/export."
PASSED_ON="e.g. --cpu_replicas=2, --eval_every_n_steps=100 or Nogueira and
Cho's --learning_rate=3e-6 --num_train_steps=400000 (docs/reranking.md)."
EXAMPLE='scripts/$NAME WORK_DIR=/tmp/run1 DATA_DIR=/data/msmarco \
    INIT_CHECKPOINT=/models/bert_base MAX_SEQ_LENGTH=512 NUM_TRAIN_STEPS=100000'
DONE='rerank_run.tsv, rerank_run.trec and rerank_results.json'

setting DATA_DIR '$REPO_ROOT/sample_data/msmarco' "" \
  "MS MARCO's files under their own names: collection.tsv,
triples.train.small.tsv, queries.dev.small.tsv, qrels.dev.small.tsv and
top1000.dev.tsv where there is one" dir
setting TRAIN_TRIPLES '$DATA_DIR/triples.train.small.tsv' --train_triples \
  "training triples (query, positive, negative)" file
setting COLLECTION '$DATA_DIR/collection.tsv' --collection \
  "the passages (pid, passage)" file
setting QUERIES '$DATA_DIR/queries.dev.small.tsv' --queries \
  "the queries re-ranked (qid, query)" file
setting QRELS '$DATA_DIR/qrels.dev.small.tsv' --qrels \
  "their judgements (TREC qrels)" file
setting CANDIDATES '' --candidates \
  "candidates to re-rank (top1000 or a run file); empty: top1000.dev.tsv
if DATA_DIR has it, else BM25's run" may_be_empty
setting BM25_TOP_K 100 "" "BM25 passages per query (the real MS MARCO: 1000)"
setting NUM_EVAL_DOCS 1000 --num_eval_docs "candidates re-ranked per query"
setting NUM_TRAIN_STEPS 2000 --num_train_steps \
  "training steps, --train_batch_size triples each"
setting MAX_QUERY_LENGTH 64 --max_query_length "query tokens kept, cut first"
setting EVAL_BATCH_SIZE 64 --eval_batch_size "held-out evaluation batch"
default OUTPUT_DIR '$WORK_DIR/rerank'
default MAX_SEQ_LENGTH 128
default TRAIN_BATCH_SIZE 16
default PREDICT_BATCH_SIZE 64
default LEARNING_RATE 2e-4
default SAVE_CHECKPOINTS_STEPS 500

# BM25 makes the candidates unless they are given or DATA_DIR has MS MARCO's
# top1000.dev.tsv.
before_fine_tuning() {
  FIRST_STAGE_NAME="top1000.dev.tsv"
  if [[ -z "$CANDIDATES" && -f "$DATA_DIR/top1000.dev.tsv" ]]; then
    CANDIDATES="$DATA_DIR/top1000.dev.tsv"
  elif [[ -z "$CANDIDATES" ]]; then
    FIRST_STAGE_NAME="BM25"
    "$PYTHON" "$REPO_ROOT/run_bm25.py" --collection="$COLLECTION" \
      --queries="$QUERIES" --qrels="$QRELS" --top_k="$BM25_TOP_K" \
      --output_dir="$OUTPUT_DIR/bm25" \
      ${VERBOSITY_FLAGS[@]+"${VERBOSITY_FLAGS[@]}"}
    CANDIDATES="$OUTPUT_DIR/bm25/bm25_run.trec"
  else
    FIRST_STAGE_NAME="$(basename "$CANDIDATES")"
  fi
}

# One line each: the first stage and BM25 + BERT, MRR@10 and the MS MARCO
# run file.
after_fine_tuning() {
  "$PYTHON" - "$OUTPUT_DIR/rerank_results.json" "$FIRST_STAGE_NAME" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
name = sys.argv[2]
for label, run in ((name, results["first_stage"]),
                   (name + " + BERT", results["reranked"])):
  print("%s: MRR@10 %.4f, Recall@1000 %.4f, nDCG@10 %.4f; run %s" % (
      label, run["mrr_at_10"], run["recall_at_1000"], run["ndcg_at_10"],
      run["run"]))
PY
}
