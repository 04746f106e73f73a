# shellcheck shell=bash
# What every script in hack/ shares, sourced first thing after `set -euo
# pipefail` (the way Kubernetes' scripts source hack/lib/init.sh):
#
#   REPO CACHE BIN STACK   the checkout, the build cache, its binaries, the
#                          local stack's state directory
#   log MESSAGE...         "HH:MM:SS NAME: MESSAGE" on stderr; NAME is the
#                          script's name without .sh (LOG_NAME overrides it)
#   die MESSAGE...         log "ERROR: MESSAGE" and exit 1
#   now                    the time in seconds, with microseconds
#   elapsed [START [N]]    seconds since START (default: when lib.sh was
#                          sourced, T0), N decimals (default 1)
#   retry [-i S] [-v] SECONDS CMD...
#                          run CMD every S seconds (default 0.2) until it
#                          succeeds or SECONDS pass; CMD's output is dropped,
#                          with -v the last attempt's is printed on failure
#   kubectl ARG...         the stack's kubectl; with --kubeconfig
#                          $HACK_KUBECONFIG when a script sets that
#   render FILE KEY=VALUE...
#                          FILE with each ${KEY} replaced by VALUE; only the
#                          keys named are replaced, and a ${UPPER_CASE}
#                          placeholder left over is an error

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${HITLESS_CACHE:-$HOME/.cache/hitless}
BIN=$CACHE/bin
# shellcheck disable=SC2034 # for the scripts that source this
STACK=${HITLESS_STACK_DIR:-$REPO/.stack}
LOG_NAME=${LOG_NAME:-$(basename "$0" .sh)}

now() { echo "${EPOCHREALTIME/,/.}"; }
T0=$(now)

log() { printf '%s %s: %s\n' "$(date +%H:%M:%S)" "$LOG_NAME" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

elapsed() { awk -v a="${1:-$T0}" -v b="$(now)" -v n="${2:-1}" 'BEGIN{printf "%.*f", n, b-a}'; }

retry() {
  local interval=0.2 verbose=0 deadline out
  while (($#)); do
    case $1 in
      -i) interval=$2; shift 2 ;;
      -v) verbose=1; shift ;;
      *) break ;;
    esac
  done
  deadline=$((SECONDS + $1))
  shift
  if ((!verbose)); then
    until "$@" >/dev/null 2>&1; do
      ((SECONDS < deadline)) || return 1
      sleep "$interval"
    done
    return 0
  fi
  until out=$("$@" 2>&1); do
    if ((SECONDS >= deadline)); then
      printf '%s\n' "$out" >&2
      return 1
    fi
    sleep "$interval"
  done
}

kubectl() {
  if [[ -n ${HACK_KUBECONFIG:-} ]]; then
    "$BIN/kubectl" --kubeconfig "$HACK_KUBECONFIG" "$@"
  else
    "$BIN/kubectl" "$@"
  fi
}

render() {
  local file=$1 text kv key left
  shift
  [[ -f $file ]] || die "render: $file is missing"
  text=$(<"$file")
  for kv in "$@"; do
    key=${kv%%=*}
    # the replacement is quoted so that an & in VALUE stays an &
    text=${text//"\${$key}"/"${kv#*=}"}
  done
  # shellcheck disable=SC2016 # a literal ${NAME}
  left=$(grep -o '\${[A-Z_][A-Z0-9_]*}' <<<"$text" | sort -u | tr '\n' ' ' || true)
  [[ -z $left ]] || die "render: $file: no value for ${left% }"
  printf '%s\n' "$text"
}
