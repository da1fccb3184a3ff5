# shellcheck shell=bash
# log and step, for the scripts that run on a GPU machine under a short lease (gpu-checks.sh,
# device-python.sh): every step has its own time limit, so a slow one costs its limit, not the lease.
# Sourced. Failures are counted in a file, not a variable (a step piped into tee runs in a subshell);
# an EXIT trap set here removes it, so a script that sources this sets no EXIT trap of its own.

log() { echo "[$(date +%T)] $*"; }

step_failures=$(mktemp "${TMPDIR:-/tmp}/stoke-steps.XXXXXX")
trap 'rm -f "$step_failures"' EXIT

# step LIMIT_S COMMAND...: runs COMMAND, interrupted (SIGINT, then SIGKILL 5 s later) at LIMIT_S
# seconds; says how it ended, counts a failure and returns its status.
step() {
  local limit=$1; shift
  log "\$ $*"
  timeout --signal=INT --kill-after=5 "$limit" "$@"
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    log "exit $rc$([[ $rc -eq 124 || $rc -eq 130 ]] && echo " (limit ${limit}s)")"
    echo "$*: exit $rc" >> "$step_failures"
  fi
  return $rc
}

# failed_steps: how many steps have failed so far, those in pipelines' subshells included.
failed_steps() { wc -l < "$step_failures"; }
