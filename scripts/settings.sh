# Sourced by the run_*.sh scripts: NAME=VALUE settings, pass-through --flags.
# The script defines NAME, VARIABLES (the settings it reads) and usage().

die() {
  echo "$NAME: error: $*" >&2
  exit 2
}

# Sets each NAME=VALUE argument whose NAME is in VARIABLES, collects --flags
# into EXTRA_FLAGS, answers -h/--help with usage().
parse_settings() {
  EXTRA_FLAGS=()
  local arg var
  for arg in "$@"; do
    case "$arg" in
      -h|--help) usage; exit 0 ;;
      --*) EXTRA_FLAGS+=("$arg") ;;
      *=*)
        var="${arg%%=*}"
        [[ " ${VARIABLES[*]} " == *" $var "* ]] ||
          die "unknown setting $var (see --help for the list)"
        printf -v "$var" '%s' "${arg#*=}" ;;
      *) die "unexpected argument '$arg'; use NAME=VALUE or --flag=value" ;;
    esac
  done
}

# Exports $OUTPUT_DIR's model to $OUTPUT_DIR/export in $EXPORT_FORMAT (none
# when empty) with export_checkpoint.py.
export_model() {
  [[ -n "$EXPORT_FORMAT" ]] || return 0
  "$PYTHON" "$REPO_ROOT/export_checkpoint.py" --checkpoint="$OUTPUT_DIR" \
    --bert_config_file="$BERT_CONFIG_FILE" --vocab_file="$VOCAB_FILE" \
    --do_lower_case="$DO_LOWER_CASE" --output_dir="$OUTPUT_DIR/export" \
    --format="$EXPORT_FORMAT" --overwrite
  echo "[$NAME] exported to $OUTPUT_DIR/export" \
    "(Hugging Face model: $OUTPUT_DIR/export/huggingface)"
}
