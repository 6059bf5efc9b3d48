#!/usr/bin/env bash
# The LAMB paper's two-phase pretraining: phase 1 on short sequences,
# then phase 2 on long ones from phase 1's weights, each phase's steps scaled
# from a baseline by two_phase.py so that it sees the baseline's examples.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR DATA_DIR PHASE1_INPUT_FILE PHASE2_INPUT_FILE
           BERT_CONFIG_FILE OUTPUT_DIR INIT_CHECKPOINT NUM_GPUS CPU_REPLICAS
           BASELINE_BATCH PHASE1_BASELINE_STEPS PHASE2_BASELINE_STEPS
           PHASE1_SEQ_LENGTH PHASE2_SEQ_LENGTH PHASE1_MAX_PREDICTIONS
           PHASE2_MAX_PREDICTIONS PHASE1_BATCH_PER_GPU PHASE2_BATCH_PER_GPU
           PHASE1_ACCUMULATION PHASE2_ACCUMULATION PHASE1_LEARNING_RATE
           PHASE2_LEARNING_RATE PHASE1_WARMUP_RATIO PHASE2_WARMUP_RATIO
           OPTIMIZER SAVE_CHECKPOINTS_STEPS DRY_RUN)

usage() {
  cat <<EOF
Usage: scripts/$NAME [NAME=VALUE ...] [-v 1] [--flag=value ...]

-v 1 shows TensorFlow's INFO detail (absl's --verbosity) in every step.

Runs run_pretraining.py twice: phase 1 on PHASE1_SEQ_LENGTH-token records
into \$OUTPUT_DIR/phase1, then phase 2 on PHASE2_SEQ_LENGTH-token records into
\$OUTPUT_DIR/phase2, initialised from phase 1's final checkpoint, with a new
learning-rate warm-up and fresh optimizer slots. Each phase runs

  nsteps = BASELINE_BATCH * PHASEn_BASELINE_STEPS
           / (PHASEn_BATCH_PER_GPU * replicas * PHASEn_ACCUMULATION)

updates (rounded up), so that it sees as many examples as the baseline
(default: the LAMB paper's 900k + 100k steps at batch 512). The global batch
of an update is PHASEn_BATCH_PER_GPU * replicas * PHASEn_ACCUMULATION. A
rerun resumes: a finished phase returns at once.

Settings come from environment variables, or from NAME=VALUE arguments, which
take precedence. Arguments starting with -- go to both phases'
run_pretraining.py, e.g. --use_fp16, --lamb_bias_correction,
--distribution_strategy=multi_worker.

  PYTHON                  Python interpreter (default: python3)
  WORK_DIR                base of the default paths
                          (default: /tmp/bert_two_phase)
  DATA_DIR                where the default records are
                          (default: \$WORK_DIR/data)
  PHASE1_INPUT_FILE       phase-1 TFRecords, comma-separated globs
                          (default: \$DATA_DIR/pretrain_128.tfrecord)
  PHASE2_INPUT_FILE       phase-2 TFRecords, comma-separated globs
                          (default: \$DATA_DIR/pretrain_512.tfrecord)
  BERT_CONFIG_FILE        model; max_position_embeddings must cover
                          PHASE2_SEQ_LENGTH (default: configs/bert_large.json)
  OUTPUT_DIR              phase1/ and phase2/ go here
                          (default: \$WORK_DIR/two_phase)
  INIT_CHECKPOINT         optional starting weights of phase 1 (default: empty)
  NUM_GPUS                GPUs, one replica each; > 1 passes --num_gpus
                          (default: 1)
  CPU_REPLICAS            replicas on the CPU instead of GPUs (--cpu_replicas);
                          0: off (default: 0)
  BASELINE_BATCH          global batch of the baseline (default: 512)
  PHASE1_BASELINE_STEPS   baseline steps of phase 1 (default: 900000)
  PHASE2_BASELINE_STEPS   baseline steps of phase 2 (default: 100000)
  PHASE1_SEQ_LENGTH       --max_seq_length of phase 1 (default: 128)
  PHASE2_SEQ_LENGTH       --max_seq_length of phase 2 (default: 512)
  PHASE1_MAX_PREDICTIONS  --max_predictions_per_seq of phase 1 (default: 20)
  PHASE2_MAX_PREDICTIONS  --max_predictions_per_seq of phase 2 (default: 80)
  PHASE1_BATCH_PER_GPU    examples per replica per micro-batch (default: 64)
  PHASE2_BATCH_PER_GPU    examples per replica per micro-batch (default: 16)
  PHASE1_ACCUMULATION     micro-batches per update (default: 8)
  PHASE2_ACCUMULATION     micro-batches per update (default: 32)
  PHASE1_LEARNING_RATE    peak learning rate; empty: the LAMB paper's rule
                          5e-3 * sqrt(global batch / 32768) (default: empty)
  PHASE2_LEARNING_RATE    same for phase 2 (default: empty)
  PHASE1_WARMUP_RATIO     warm-up fraction of the phase's steps; empty: the
                          LAMB paper's 0.2 * global batch / 32768
                          (default: empty)
  PHASE2_WARMUP_RATIO     same for phase 2 (default: empty)
  OPTIMIZER               --optimizer: lamb or adamw (default: lamb)
  SAVE_CHECKPOINTS_STEPS  steps between checkpoints (default: 1000)
  DRY_RUN                 1: print the computed steps and both commands, run
                          nothing, need no input files (default: 0)

The defaults reach the baseline's batch of 512 on one GPU by accumulation,
so they run exactly 900000 and 100000 steps.
Example (8 GPUs, batch 512 without accumulation in phase 1):
  scripts/$NAME NUM_GPUS=8 PHASE1_ACCUMULATION=1 PHASE2_BATCH_PER_GPU=8 \\
    PHASE2_ACCUMULATION=8 DRY_RUN=1
EOF
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"
settings_from_flags BERT_CONFIG_FILE:bert_config_file OPTIMIZER:optimizer \
  SAVE_CHECKPOINTS_STEPS:save_checkpoints_steps NUM_GPUS:num_gpus \
  CPU_REPLICAS:cpu_replicas
# What differs between the phases, or follows from the step rule: passed to
# both, the flag would stand for both phases' settings.
flag_set_by_script output_dir OUTPUT_DIR
flag_set_by_script input_file PHASE1_INPUT_FILE PHASE2_INPUT_FILE
flag_set_by_script init_checkpoint INIT_CHECKPOINT
flag_set_by_script max_seq_length PHASE1_SEQ_LENGTH PHASE2_SEQ_LENGTH
flag_set_by_script max_predictions_per_seq PHASE1_MAX_PREDICTIONS \
  PHASE2_MAX_PREDICTIONS
flag_set_by_script train_batch_size PHASE1_BATCH_PER_GPU \
  PHASE2_BATCH_PER_GPU NUM_GPUS CPU_REPLICAS PHASE1_ACCUMULATION \
  PHASE2_ACCUMULATION
flag_set_by_script num_accumulation_steps PHASE1_ACCUMULATION \
  PHASE2_ACCUMULATION
flag_set_by_script num_train_steps BASELINE_BATCH PHASE1_BASELINE_STEPS \
  PHASE2_BASELINE_STEPS
flag_set_by_script num_warmup_steps PHASE1_WARMUP_RATIO PHASE2_WARMUP_RATIO
flag_set_by_script learning_rate PHASE1_LEARNING_RATE PHASE2_LEARNING_RATE

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_two_phase}"
DATA_DIR="${DATA_DIR:-$WORK_DIR/data}"
PHASE1_INPUT_FILE="${PHASE1_INPUT_FILE:-$DATA_DIR/pretrain_128.tfrecord}"
PHASE2_INPUT_FILE="${PHASE2_INPUT_FILE:-$DATA_DIR/pretrain_512.tfrecord}"
BERT_CONFIG_FILE="${BERT_CONFIG_FILE:-$REPO_ROOT/configs/bert_large.json}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/two_phase}"
INIT_CHECKPOINT="${INIT_CHECKPOINT:-}"
NUM_GPUS="${NUM_GPUS:-1}"
CPU_REPLICAS="${CPU_REPLICAS:-0}"
BASELINE_BATCH="${BASELINE_BATCH:-512}"
PHASE1_BASELINE_STEPS="${PHASE1_BASELINE_STEPS:-900000}"
PHASE2_BASELINE_STEPS="${PHASE2_BASELINE_STEPS:-100000}"
PHASE1_SEQ_LENGTH="${PHASE1_SEQ_LENGTH:-128}"
PHASE2_SEQ_LENGTH="${PHASE2_SEQ_LENGTH:-512}"
PHASE1_MAX_PREDICTIONS="${PHASE1_MAX_PREDICTIONS:-20}"
PHASE2_MAX_PREDICTIONS="${PHASE2_MAX_PREDICTIONS:-80}"
PHASE1_BATCH_PER_GPU="${PHASE1_BATCH_PER_GPU:-64}"
PHASE2_BATCH_PER_GPU="${PHASE2_BATCH_PER_GPU:-16}"
PHASE1_ACCUMULATION="${PHASE1_ACCUMULATION:-8}"
PHASE2_ACCUMULATION="${PHASE2_ACCUMULATION:-32}"
PHASE1_LEARNING_RATE="${PHASE1_LEARNING_RATE:-}"
PHASE2_LEARNING_RATE="${PHASE2_LEARNING_RATE:-}"
PHASE1_WARMUP_RATIO="${PHASE1_WARMUP_RATIO:-}"
PHASE2_WARMUP_RATIO="${PHASE2_WARMUP_RATIO:-}"
OPTIMIZER="${OPTIMIZER:-lamb}"
SAVE_CHECKPOINTS_STEPS="${SAVE_CHECKPOINTS_STEPS:-1000}"
DRY_RUN="${DRY_RUN:-0}"

for var in CPU_REPLICAS; do
  [[ "${!var}" =~ ^[0-9]+$ ]] ||
    die "$var must be a whole number, got '${!var}'"
done
for var in NUM_GPUS BASELINE_BATCH PHASE1_BASELINE_STEPS \
           PHASE2_BASELINE_STEPS PHASE1_SEQ_LENGTH PHASE2_SEQ_LENGTH \
           PHASE1_MAX_PREDICTIONS PHASE2_MAX_PREDICTIONS PHASE1_BATCH_PER_GPU \
           PHASE2_BATCH_PER_GPU PHASE1_ACCUMULATION PHASE2_ACCUMULATION \
           SAVE_CHECKPOINTS_STEPS; do
  [[ "${!var}" =~ ^[1-9][0-9]*$ ]] ||
    die "$var must be a positive whole number, got '${!var}'"
done
NUMBER='^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$'
for var in PHASE1_LEARNING_RATE PHASE2_LEARNING_RATE PHASE1_WARMUP_RATIO \
           PHASE2_WARMUP_RATIO; do
  [[ -z "${!var}" || "${!var}" =~ $NUMBER ]] ||
    die "$var must be empty or a number like 1e-4 or 0.01, got '${!var}'"
done
[[ "$OPTIMIZER" == lamb || "$OPTIMIZER" == adamw ]] ||
  die "OPTIMIZER must be lamb or adamw, got '$OPTIMIZER'"
[[ "$DRY_RUN" == 0 || "$DRY_RUN" == 1 ]] ||
  die "DRY_RUN must be 0 or 1, got '$DRY_RUN'"
command -v "$PYTHON" > /dev/null || die "PYTHON=$PYTHON is not a command"

# Replicas of the step rule, and the flags that make run_pretraining.py use
# that many.
DEVICE_FLAGS=()
if (( CPU_REPLICAS > 0 )); then
  (( NUM_GPUS <= 1 )) ||
    die "set NUM_GPUS or CPU_REPLICAS, not both (got $NUM_GPUS and" \
        "$CPU_REPLICAS)"
  REPLICAS="$CPU_REPLICAS"
  (( CPU_REPLICAS == 1 )) || DEVICE_FLAGS=(--cpu_replicas="$CPU_REPLICAS")
else
  REPLICAS="$NUM_GPUS"
  (( NUM_GPUS == 1 )) || DEVICE_FLAGS=(--num_gpus="$NUM_GPUS")
fi

# Prints "batch steps warmup learning_rate" of phase $1, from two_phase.py.
phase_plan() {
  local phase="$1" lr ratio output pair values=()
  lr="PHASE${phase}_LEARNING_RATE"
  ratio="PHASE${phase}_WARMUP_RATIO"
  local args=(--baseline_batch="$BASELINE_BATCH"
              --baseline_steps="$(var_of "$phase" BASELINE_STEPS)"
              --batch_per_gpu="$(var_of "$phase" BATCH_PER_GPU)"
              --num_gpus="$REPLICAS"
              --accumulation="$(var_of "$phase" ACCUMULATION)")
  [[ -z "${!lr}" ]] || args+=(--learning_rate="${!lr}")
  [[ -z "${!ratio}" ]] || args+=(--warmup_ratio="${!ratio}")
  if ! output="$("$PYTHON" "$REPO_ROOT/two_phase.py" "${args[@]}" 2>&1)"; then
    die "phase $phase: ${output##*error: } (PHASE${phase}_* settings)"
  fi
  # The last line is "train_batch_size=B num_train_steps=N ...".
  for pair in ${output##*$'\n'}; do
    values+=("${pair#*=}")
  done
  echo "${values[*]}"
}

var_of() {  # phase, suffix: the value of PHASE<phase>_<suffix>
  local name="PHASE$1_$2"
  echo "${!name}"
}

PLAN1="$(phase_plan 1)"
PLAN2="$(phase_plan 2)"
read -r BATCH1 STEPS1 WARMUP1 LR1 <<< "$PLAN1"
read -r BATCH2 STEPS2 WARMUP2 LR2 <<< "$PLAN2"

PHASE1_DIR="$OUTPUT_DIR/phase1"
PHASE2_DIR="$OUTPUT_DIR/phase2"
INIT_FLAGS=()
if [[ -n "$INIT_CHECKPOINT" ]]; then
  INIT_FLAGS=(--init_checkpoint="$INIT_CHECKPOINT")
fi

common_flags=(--do_train --bert_config_file="$BERT_CONFIG_FILE"
              --optimizer="$OPTIMIZER"
              --save_checkpoints_steps="$SAVE_CHECKPOINTS_STEPS"
              ${DEVICE_FLAGS[@]+"${DEVICE_FLAGS[@]}"})
PHASE1_COMMAND=("$PYTHON" "$REPO_ROOT/run_pretraining.py" "${common_flags[@]}"
  --input_file="$PHASE1_INPUT_FILE" --output_dir="$PHASE1_DIR"
  --max_seq_length="$PHASE1_SEQ_LENGTH"
  --max_predictions_per_seq="$PHASE1_MAX_PREDICTIONS"
  --train_batch_size="$BATCH1" --num_accumulation_steps="$PHASE1_ACCUMULATION"
  --num_train_steps="$STEPS1" --num_warmup_steps="$WARMUP1"
  --learning_rate="$LR1"
  ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"})
PHASE2_COMMAND=("$PYTHON" "$REPO_ROOT/run_pretraining.py" "${common_flags[@]}"
  --input_file="$PHASE2_INPUT_FILE" --output_dir="$PHASE2_DIR"
  --init_checkpoint="$PHASE1_DIR"
  --max_seq_length="$PHASE2_SEQ_LENGTH"
  --max_predictions_per_seq="$PHASE2_MAX_PREDICTIONS"
  --train_batch_size="$BATCH2" --num_accumulation_steps="$PHASE2_ACCUMULATION"
  --num_train_steps="$STEPS2" --num_warmup_steps="$WARMUP2"
  --learning_rate="$LR2"
  ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"})

if [[ "$DRY_RUN" != 1 ]]; then
  for phase in 1 2; do
    check_inputs "PHASE${phase}_INPUT_FILE" "$(var_of $phase INPUT_FILE)" \
      "make them with scripts/run_create.sh" \
      "MAX_SEQ_LENGTH=$(var_of $phase SEQ_LENGTH)" \
      "MAX_PREDICTIONS_PER_SEQ=$(var_of $phase MAX_PREDICTIONS)" \
      "or set PHASE${phase}_INPUT_FILE"
  done
  [[ -f "$BERT_CONFIG_FILE" ]] ||
    die "BERT_CONFIG_FILE=$BERT_CONFIG_FILE does not exist"
fi
# Phase 2 starts after phase 1 has trained: what would refuse it, refused
# before (a dry run too, when the config is there): its length against the
# config, its records against its length and masks (run_pretraining.py's
# own check of the first record of each file).
check_seq_lengths_fit PHASE1_SEQ_LENGTH PHASE2_SEQ_LENGTH
if [[ "$DRY_RUN" != 1 ]]; then
  CHECK_RECORDS='from bertkit.common import file_patterns
from bertkit.engine.input import record_checks
record_checks.check_pretraining_records(
    file_patterns.expand_file_patterns(sys.argv[1]), int(sys.argv[2]),
    int(sys.argv[3]))'
  python_check "phase 2: " " (PHASE2_* settings)" "$CHECK_RECORDS" \
    "$PHASE2_INPUT_FILE" "$PHASE2_SEQ_LENGTH" "$PHASE2_MAX_PREDICTIONS"
fi

describe() {  # phase, seq, batch per gpu, accumulation, batch, steps, ...
  echo "[$NAME] phase $1: seq $2, global batch $5 ($3 per replica x" \
    "$REPLICAS replica(s) x $4 micro-batches), $6 steps (baseline" \
    "$BASELINE_BATCH x $7), warm-up $8, learning rate $9"
}
describe 1 "$PHASE1_SEQ_LENGTH" "$PHASE1_BATCH_PER_GPU" "$PHASE1_ACCUMULATION" \
  "$BATCH1" "$STEPS1" "$PHASE1_BASELINE_STEPS" "$WARMUP1" "$LR1"
describe 2 "$PHASE2_SEQ_LENGTH" "$PHASE2_BATCH_PER_GPU" "$PHASE2_ACCUMULATION" \
  "$BATCH2" "$STEPS2" "$PHASE2_BASELINE_STEPS" "$WARMUP2" "$LR2"

if [[ "$DRY_RUN" == 1 ]]; then
  echo "[$NAME] DRY_RUN=1: would run"
  printf '%q ' "${PHASE1_COMMAND[@]}"; echo
  printf '%q ' "${PHASE2_COMMAND[@]}"; echo
  exit 0
fi

echo "[$NAME] phase 1 into $PHASE1_DIR"
"${PHASE1_COMMAND[@]}"
echo "[$NAME] phase 2 from $PHASE1_DIR into $PHASE2_DIR"
"${PHASE2_COMMAND[@]}"
echo "[$NAME] done: phase-2 checkpoints in $PHASE2_DIR"
