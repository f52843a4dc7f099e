#!/usr/bin/env bash
# `make test`'s driver: runs each step as `$MAKE STEP`, in order, and prints the time it took as
# it ends and a table of all of them at the end, so that a CI log says where its minutes went.
#
#   MAKE=make tests/timed_steps.sh --built "TARGET..." STEP...
#
# --built names the targets the steps need built (the library, the package, the model). They
# are made once, as the first step ("builds"), and then passed to every later make with -o, so
# that no step makes them again.
# A step that fails stops the run, as a failed prerequisite stops make: its exit status is this
# script's, after the table. CPU is user + sys of the step's processes (bash's `times`, which
# counts each process once it is waited for); on a loaded machine it is the steadier figure.
set -uo pipefail

make=${MAKE:-make}
built=()
if [[ "${1:-}" == --built ]]; then
  read -r -a built <<< "${2:?--built needs the targets to build first}"
  shift 2
fi
skip=()
for target in "${built[@]}"; do skip+=(-o "$target"); done

# The CPU seconds (user + sys) of this shell's children so far, in CPU: the second line of `times`
# ("XmY.YYYs XmY.YYYs"), which must run in this shell, not in a $(...) subshell.
times_file=$(mktemp)
trap 'rm -f "$times_file"' EXIT
children_cpu() {
  times > "$times_file"
  CPU=$(awk 'NR == 2 {
    total = 0
    for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); total += t[1] * 60 + t[2] }
    printf "%.1f", total
  }' "$times_file")
}
load() { cut -d ' ' -f 1 /proc/loadavg; }

rows=()
status=0
run_step() {
  local name=$1; shift
  local wall_start=$SECONDS cpu_start load_start
  children_cpu
  cpu_start=$CPU
  load_start=$(load)
  "$@"
  status=$?
  local wall=$((SECONDS - wall_start)) cpu result=ok
  children_cpu
  cpu=$(awk -v a="$CPU" -v b="$cpu_start" 'BEGIN { printf "%.0f", a - b }')
  [[ $status -eq 0 ]] || result="FAILED (exit $status)"
  rows+=("$(printf '%-16s %7d %7d   %4s -> %-4s  %s' "$name" "$wall" "$cpu" "$load_start" "$(load)" "$result")")
  echo "== make test: $name: $result, ${wall} s wall, ${cpu} s CPU"
  return $status
}

report() {
  children_cpu
  echo
  echo "== make test: time per step (CPU: user + sys of the step's processes; load: 1-minute average)"
  printf '%-16s %7s %7s   %s\n' step "wall s" "CPU s" "load start -> end"
  printf '%s\n' "${rows[@]}"
  printf '%-16s %7d %7.0f\n' total "$SECONDS" "$CPU"
}

if [[ ${#built[@]} -gt 0 ]]; then
  run_step builds "$make" --no-print-directory "${built[@]}" || { report; exit $status; }
fi
for step in "$@"; do
  run_step "$step" "$make" --no-print-directory "${skip[@]}" "$step" || { report; exit $status; }
done
report
