#!/usr/bin/env bash
# MS MARCO passage re-ranking: BM25 (run_bm25.py) -> fine-tune on triples and
# re-rank (run_rerank.py --do_train --do_eval) -> MRR@10 of both, then the
# export (Hugging Face: BertForSequenceClassification, one label).
# Its settings and defaults: configs/fine_tuning/rerank.sh (--help lists
# them); the steps every fine-tuning script shares: scripts/fine_tune.sh.
TASK_SETTINGS=rerank
# shellcheck source=scripts/fine_tune.sh
source "$(dirname "${BASH_SOURCE[0]}")/fine_tune.sh"
