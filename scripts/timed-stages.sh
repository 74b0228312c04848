#!/usr/bin/env bash
# Runs `make STAGE` for each stage named on the command line, one after another, and prints how
# long each took, so that a slow stage shows in every CI log. Stops at the first stage that fails
# and still prints the table (the failed stage marked). Used by `make test`.
#   scripts/timed-stages.sh deps build unit-test ...
set -uo pipefail
cd "$(dirname "$0")/.."

MAKE_CMD="${MAKE:-make}"
names=()
seconds=()
results=()
start_all=$(date +%s)

print_table() {
  local total=$(( $(date +%s) - start_all ))
  echo
  echo "== make test: time per stage =="
  local i
  for i in "${!names[@]}"; do
    printf '  %-18s %5d s  %s\n' "${names[$i]}" "${seconds[$i]}" "${results[$i]}"
  done
  printf '  %-18s %5d s  (%d min %d s)\n' "total" "$total" $((total / 60)) $((total % 60))
}

for stage in "$@"; do
  echo "== stage $stage =="
  begin=$(date +%s)
  $MAKE_CMD --no-print-directory "$stage"
  rc=$?
  names+=("$stage")
  seconds+=($(( $(date +%s) - begin )))
  if [[ $rc -ne 0 ]]; then
    results+=("FAILED (exit $rc)")
    print_table
    exit "$rc"
  fi
  results+=("ok")
done
print_table
