# Sourced by hack/ scripts: one quiet line per step, with its time.
#
# step DESCRIPTION COMMAND...: runs COMMAND with its output (the go tool's
# "go: downloading" lines, compiler output) in a log under
# ${STEP_LOGS:-_output/logs}, and prints DESCRIPTION and how long it took.
# When COMMAND fails, the log's last lines are printed and step fails with
# COMMAND's status.
step() {
  local what=$1; shift
  local dir=${STEP_LOGS:-_output/logs}
  mkdir -p "${dir}"
  local log
  log="${dir}/$(date +%Y%m%d-%H%M%S)-$(tr -c 'a-zA-Z0-9\n' '-' <<<"${what}" | head -c 60).log"
  local start=${SECONDS} status=0
  printf '  %-68s' "${what}"
  "$@" >"${log}" 2>&1 || status=$?
  if [[ ${status} -eq 0 ]]; then
    printf '%5ds\n' $((SECONDS - start))
    return 0
  fi
  printf ' failed after %ds\n' $((SECONDS - start))
  tail -n 40 "${log}" | sed 's/^/    | /' >&2
  echo "    (the whole output: ${log})" >&2
  return "${status}"
}
