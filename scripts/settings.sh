# Sourced by the run_*.sh scripts: NAME=VALUE settings, pass-through --flags.
# The script defines NAME, VARIABLES (the settings it reads) and usage().

die() {
  echo "$NAME: error: $*" >&2
  exit 2
}

# Sets each NAME=VALUE argument whose NAME is in VARIABLES, collects --flags
# into EXTRA_FLAGS, answers -h/--help with usage(). -v N (absl's verbosity:
# 1 shows TensorFlow's INFO detail) becomes --verbosity=N in EXTRA_FLAGS and
# in VERBOSITY_FLAGS, which every Python program of the script gets.
parse_settings() {
  EXTRA_FLAGS=()
  VERBOSITY_FLAGS=()
  local arg var
  while [[ $# -gt 0 ]]; do
    arg="$1"
    shift
    case "$arg" in
      -h|--help) usage; exit 0 ;;
      -v|--verbosity|--v)
        [[ $# -gt 0 ]] || die "$arg needs a value, e.g. $arg 1"
        VERBOSITY_FLAGS=(--verbosity="$1")
        shift ;;
      --verbosity=*|--v=*|-v=*) VERBOSITY_FLAGS=(--verbosity="${arg#*=}") ;;
      --*) EXTRA_FLAGS+=("$arg") ;;
      *=*)
        var="${arg%%=*}"
        [[ " ${VARIABLES[*]} " == *" $var "* ]] ||
          die "unknown setting $var (see --help for the list)"
        printf -v "$var" '%s' "${arg#*=}" ;;
      *) die "unexpected argument '$arg'; use NAME=VALUE or --flag=value" ;;
    esac
  done
  EXTRA_FLAGS+=(${VERBOSITY_FLAGS[@]+"${VERBOSITY_FLAGS[@]}"})
}

# The value the last --$1 of EXTRA_FLAGS before a lone -- gives, in PASSED
# (--$1=V: V; --$1: true; --no$1: false); fails when none does.
passed_flag() {
  local flag="$1" arg found=1
  PASSED=""
  for arg in ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}; do
    case "$arg" in
      --) break ;;
      "--$flag="*) PASSED="${arg#*=}"; found=0 ;;
      "--$flag") PASSED=true; found=0 ;;
      "--no$flag") PASSED=false; found=0 ;;
    esac
  done
  return "$found"
}

# Whether two values of a setting mean the same: the same text, path,
# number or truth value.
same_value() {
  [[ "$1" == "$2" ]] && return 0
  [[ -n "$1" && -n "$2" &&
     "$(realpath -m -- "$1")" == "$(realpath -m -- "$2")" ]] && return 0
  local number='^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$' a b
  if [[ "$1" =~ $number && "$2" =~ $number ]]; then
    awk 'BEGIN { exit !(ARGV[1] + 0 == ARGV[2] + 0) }' "$1" "$2"
    return
  fi
  a="$(truth_value "$1")" && b="$(truth_value "$2")" && [[ "$a" == "$b" ]]
}

truth_value() {  # absl's spellings of a boolean: true or false; else fails
  case "${1,,}" in
    true|t|1) echo true ;;
    false|f|0) echo false ;;
    *) return 1 ;;
  esac
}

# A setting and the flag the script passes it as are one: given as a
# --flag only, the flag's value becomes the setting's (so that the script's
# later steps, the export and its messages, use it); given as both with
# different values, the script dies before it starts anything. $1: the
# setting, $2: its flag without --, $3: "given" when the setting was given
# (environment or NAME=VALUE), else its default is not applied yet.
setting_from_flag() {
  local name="$1" flag="$2" given="$3"
  passed_flag "$flag" || return 0
  if [[ "$given" != given ]]; then
    printf -v "$name" '%s' "$PASSED"
  elif ! same_value "${!name}" "$PASSED"; then
    die "$name=${!name} and --$flag=$PASSED disagree ($NAME passes" \
        "$name as --$flag); give one of them"
  fi
}

# setting_from_flag for the script's NAME:flag pairs, before its defaults
# are applied: a setting is given when it is not empty.
settings_from_flags() {
  local pair name
  for pair in "$@"; do
    name="${pair%%:*}"
    setting_from_flag "$name" "${pair#*:}" "${!name:+given}"
  done
}

# Dies when EXTRA_FLAGS holds --$1, which the script sets itself from the
# settings named after it (one value per phase).
flag_set_by_script() {
  local flag="$1" settings
  shift
  passed_flag "$flag" || return 0
  printf -v settings '%s, ' "$@"
  die "--$flag=$PASSED: $NAME sets --$flag itself, from ${settings%, };" \
      "set $( (( $# > 1 )) && echo those || echo that) instead"
}

# Dies when EXTRA_FLAGS holds --$1 with another value than $2, the one the
# script passes, made from setting $3.
flag_made_from_setting() {
  passed_flag "$1" || return 0
  same_value "$2" "$PASSED" ||
    die "--$1=$PASSED: $NAME passes --$1=$2, made from $3; set $3 instead"
}

# Runs the Python statements $3 (the repository first on the path,
# sys.argv[1:] the arguments after $3), which raise the UserError of a
# program's own check; dies with its line between $1 and $2.
python_check() {
  local before="$1" after="$2" code="$3" refused status=0
  shift 3
  refused="$(TF_CPP_MIN_LOG_LEVEL=3 "$PYTHON" -c "import sys
sys.path.insert(0, sys.argv.pop(1))
from bertkit.common.errors import UserError
try:
$(sed 's/^/  /' <<< "$code")
except UserError as e:
  print(e)" "$REPO_ROOT" "$@" 2> /dev/null)" || status=$?
  (( status == 0 )) || die "PYTHON=$PYTHON cannot run $NAME's checks" \
    "(exit $status)"
  [[ -z "$refused" ]] || die "$before$refused$after"
}

# Dies unless EXPORT_FORMAT names formats export_checkpoint.py writes: the
# program says which (its parse_formats), so they are listed there only.
check_export_format() {
  [[ -z "$EXPORT_FORMAT" ]] || python_check "" "" 'import export_checkpoint
export_checkpoint.parse_formats(sys.argv[1].split(","), "EXPORT_FORMAT")' \
    "$EXPORT_FORMAT"
}

# Dies when the options of program $1 (its options class $2, module:Class)
# refuse the flags that follow: the program's own checks, asked before an
# earlier, longer step.
check_program_flags() {
  local program="$1" class="$2"
  shift 2
  python_check "$program: " "" 'import importlib
from bertkit.common import option_flags
module, name = sys.argv[1].split(":")
option_flags.options_from_args(
    getattr(importlib.import_module(module), name), sys.argv[2:])' \
    "$class" "$@"
}

# Dies when a setting named in the arguments, a sequence length, exceeds
# the max_position_embeddings of BERT_CONFIG_FILE. A config that is not
# there, not JSON or without the field is left to the program (which also
# refuses lengths that are not numbers).
check_seq_lengths_fit() {
  local positions name
  positions="$("$PYTHON" -c 'import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
  print(json.load(f).get("max_position_embeddings", ""))' \
    "$BERT_CONFIG_FILE" 2>/dev/null)" || return 0
  [[ "$positions" =~ ^[0-9]+$ ]] || return 0
  for name in "$@"; do
    [[ ! "${!name}" =~ ^[0-9]+$ ]] || (( ${!name} <= positions )) ||
      die "$name=${!name} exceeds the max_position_embeddings" \
          "$positions of BERT_CONFIG_FILE=$BERT_CONFIG_FILE; use a config" \
          "that covers it, or $name <= $positions"
  done
}

# Dies unless every comma-separated glob in $2 matches a file. $1 names the
# setting in the message; the remaining words say how to make the files.
check_inputs() {
  local name="$1" value="$2" pattern patterns
  shift 2
  IFS=',' read -r -a patterns <<< "$value"
  for pattern in "${patterns[@]}"; do
    compgen -G "$pattern" > /dev/null ||
      die "$name: no file matches '$pattern'${*:+; $*}"
  done
}

# Exports $OUTPUT_DIR's model to $OUTPUT_DIR/export in $EXPORT_FORMAT (none
# when empty) with export_checkpoint.py.
export_model() {
  [[ -n "$EXPORT_FORMAT" ]] || return 0
  "$PYTHON" "$REPO_ROOT/export_checkpoint.py" --checkpoint="$OUTPUT_DIR" \
    --bert_config_file="$BERT_CONFIG_FILE" --vocab_file="$VOCAB_FILE" \
    --do_lower_case="$DO_LOWER_CASE" --output_dir="$OUTPUT_DIR/export" \
    --format="$EXPORT_FORMAT" --overwrite \
    ${VERBOSITY_FLAGS[@]+"${VERBOSITY_FLAGS[@]}"}
  echo "[$NAME] exported to $OUTPUT_DIR/export" \
    "(Hugging Face model: $OUTPUT_DIR/export/huggingface)"
}
