# Sourced by the fine-tuning scripts (run_classify.sh, run_squad.sh,
# run_ner.sh, run_swag.sh, run_rerank.sh), which set TASK_SETTINGS: the name of the task's
# file in configs/fine_tuning/. That file says what the task runs (PROGRAM,
# STAGE_FLAGS), what its usage says, its own settings (`setting`) and its
# defaults of the settings below (`default`); this file does the rest, once:
# NAME=VALUE settings and pass-through --flags, the checks of the inputs, the
# program's command line, the export.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
# Each setting: its name, its default (a string expanded when it is
# applied, so that it may name settings before it), the program's flag it
# sets ("" for none), its help, and its kind: "" (a value), "dir" or "file"
# (must exist), "may_be_empty" (an empty value means none).
SETTINGS=()
declare -A SETTING_DEFAULT SETTING_FLAG SETTING_HELP SETTING_KIND

setting() {
  local name="$1"
  SETTINGS+=("$name")
  SETTING_DEFAULT[$name]="${SETTING_DEFAULT[$name]:-$2}"
  SETTING_FLAG[$name]="$3"
  SETTING_HELP[$name]="$4"
  SETTING_KIND[$name]="${5:-}"
}

# A task's default of a setting every fine-tuning script has (before the
# setting is declared).
default() {
  SETTING_DEFAULT[$1]="$2"
}

setting PYTHON python3 "" "Python interpreter"
setting WORK_DIR /tmp/bert_sample "" "base of the default paths"
# shellcheck source=/dev/null
source "$REPO_ROOT/configs/fine_tuning/$TASK_SETTINGS.sh"
setting VOCAB_FILE '$WORK_DIR/data/vocab.txt' --vocab_file \
  "the pretrained model's vocab"
setting BERT_CONFIG_FILE '$REPO_ROOT/configs/bert_tiny.json' \
  --bert_config_file "the pretrained model's config"
setting INIT_CHECKPOINT '$WORK_DIR/pretrain' "" \
  "starting weights: a checkpoint prefix or directory (also Google's layout
or a Hugging Face directory), by default run_pre.sh's output; set it empty
to train from scratch" may_be_empty
setting OUTPUT_DIR '$WORK_DIR/finetune' --output_dir "checkpoints and results"
setting DO_LOWER_CASE true --do_lower_case "true for an uncased model"
setting MAX_SEQ_LENGTH 128 --max_seq_length "WordPieces per sequence"
setting TRAIN_BATCH_SIZE 32 --train_batch_size \
  "global batch over all replicas"
setting PREDICT_BATCH_SIZE 8 --predict_batch_size "predict batch"
setting LEARNING_RATE 5e-5 --learning_rate "peak learning rate"
setting NUM_TRAIN_EPOCHS 3 --num_train_epochs "passes over the training data"
setting WARMUP_PROPORTION 0.1 --warmup_proportion \
  "fraction of steps with warm-up"
setting SAVE_CHECKPOINTS_STEPS 1000 --save_checkpoints_steps \
  "steps between checkpoints"
setting EXPORT_FORMAT google,huggingface,saved_model "" \
  "export_checkpoint.py --format; empty skips the export" may_be_empty

VARIABLES=("${SETTINGS[@]}")

# `text` folded to `width` columns, its later lines indented by `indent`.
wrapped() {
  local text="$1" width="$2" indent="$3"
  printf '%s\n' "$(printf '%s' "${text//$'\n'/ }" | fold -s -w "$width" |
    sed "s/ *\$//; 2,\$s/^/$indent/")"
}

usage() {
  local name
  printf 'Usage: scripts/%s [NAME=VALUE ...] [-v 1] [--flag=value ...]\n\n' \
    "$NAME"
  printf -- "-v 1 shows TensorFlow's INFO detail (absl's --verbosity) in "
  printf 'every step.\n\n%s\n\n' "$SUMMARY"
  wrapped "Settings come from environment variables, or from NAME=VALUE
arguments, which take precedence. Arguments starting with -- are passed on to
$PROGRAM, $PASSED_ON" 76 ""
  echo
  for name in "${SETTINGS[@]}"; do
    printf '  %-23s ' "$name"
    wrapped "${SETTING_HELP[$name]} (default: ${SETTING_DEFAULT[$name]#\$REPO_ROOT/})" \
      50 "                          "
  done
  printf '\nExample:\n  %s\n' "${EXAMPLE//\$NAME/$NAME}"
}

# The checks before starting: the vocab, the BERT config and $PYTHON exist;
# $INIT_CHECKPOINT, when set, is a directory or a checkpoint prefix. Sets
# INIT_FLAGS (empty to train from scratch).
check_finetuning_inputs() {
  [[ -f "$VOCAB_FILE" ]] ||
    die "VOCAB_FILE=$VOCAB_FILE does not exist;" \
        "run scripts/run_create.sh first or set VOCAB_FILE"
  [[ -f "$BERT_CONFIG_FILE" ]] ||
    die "BERT_CONFIG_FILE=$BERT_CONFIG_FILE does not exist"
  INIT_FLAGS=()
  if [[ -n "$INIT_CHECKPOINT" ]]; then
    [[ -d "$INIT_CHECKPOINT" || -f "$INIT_CHECKPOINT.index" ]] ||
      die "INIT_CHECKPOINT=$INIT_CHECKPOINT is neither a directory nor a" \
          "checkpoint prefix; run scripts/run_pre.sh first, or set" \
          "INIT_CHECKPOINT= to train from scratch"
    INIT_FLAGS=(--init_checkpoint="$INIT_CHECKPOINT")
  fi
  command -v "$PYTHON" > /dev/null || die "PYTHON=$PYTHON is not a command"
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"

# A setting given as its --flag too: one value (setting_from_flag).
for name in "${SETTINGS[@]}"; do
  flag="${SETTING_FLAG[$name]}"
  [[ "$name" != INIT_CHECKPOINT ]] || flag=--init_checkpoint
  [[ -n "$flag" ]] || continue
  given=""
  if [[ "${SETTING_KIND[$name]}" == may_be_empty && -v $name ||
        -n "${!name:-}" ]]; then
    given=given
  fi
  setting_from_flag "$name" "${flag#--}" "$given"
done

# Each setting: the environment's or NAME=VALUE's value, else its default;
# "may_be_empty" settings keep a value set empty.
for name in "${SETTINGS[@]}"; do
  if [[ "${SETTING_KIND[$name]}" == may_be_empty ]]; then
    [[ -v $name ]] || eval "$name=\"${SETTING_DEFAULT[$name]}\""
  elif [[ -z "${!name:-}" ]]; then
    eval "$name=\"${SETTING_DEFAULT[$name]}\""
  fi
done

for name in "${SETTINGS[@]}"; do
  case "${SETTING_KIND[$name]}" in
    dir) [[ -d "${!name}" ]] || die "$name=${!name} is not a directory" ;;
    file) [[ -f "${!name}" ]] || die "$name=${!name} does not exist" ;;
  esac
done
check_finetuning_inputs
check_export_format
check_seq_lengths_fit MAX_SEQ_LENGTH
# A task's steps before and after its program's (configs/fine_tuning/rerank.sh:
# BM25 first, the figures last), when its settings file defines them.
if declare -F before_fine_tuning > /dev/null; then before_fine_tuning; fi

COMMAND=("$PYTHON" "$REPO_ROOT/$PROGRAM" "${STAGE_FLAGS[@]}")
for name in "${SETTINGS[@]}"; do
  if [[ -n "${SETTING_FLAG[$name]}" ]]; then
    COMMAND+=("${SETTING_FLAG[$name]}=${!name}")
  fi
done
echo "[$NAME] fine-tuning $(eval "echo \"$WHAT\"") from" \
  "${INIT_CHECKPOINT:-scratch} into $OUTPUT_DIR"
"${COMMAND[@]}" ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} \
  ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
echo "[$NAME] done: $(eval "echo \"$DONE\"") in $OUTPUT_DIR"
# The class names of a labelled head come from the labels.txt the program
# wrote.
export_model
if declare -F after_fine_tuning > /dev/null; then after_fine_tuning; fi
