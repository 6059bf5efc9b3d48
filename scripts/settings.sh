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
