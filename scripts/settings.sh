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
