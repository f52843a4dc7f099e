#!/usr/bin/env bash
# `make test`'s driver: runs each step as `$MAKE STEP`, in order, and prints the time it took as
# it ends and a table of all of them at the end, so that a CI log says where its minutes went.
#
#   MAKE=make tests/timed_steps.sh --built "TARGET..." [--built-jobs N] [--beside STEP "STEP..."] STEP...
#
# --built names the targets the steps need built (the library, the package, the model). They
# are made once, as the first step ("builds"), and then passed to every later make with -o, so
# that no step makes them again. --built-jobs N makes them N at a time (make -jN), so that a
# build that needs no venv (cargo's) runs while the venv downloads.
# --beside STEP "STEPS" runs STEPS one after another, at a lower priority (nice), while the
# steps from STEP on run: the Python tests leave most of a second core idle (their ranks wait on
# each other and on timeouts), which builds (the prebuilt library, tch's C++) can use without
# taking the tests' CPU when they need it. Those steps' output is kept in a file each under
# $LOGS (default build/test-logs) and printed when the lane is done, so the log reads in order.
# A step that fails fails the run, with its exit status, after the table: in the main line it
# stops the run (and the lane, whose output so far is printed); in the lane it stops the lane,
# and the main line goes on to its end. Interrupted, the script stops the lane too. CPU is user
# + sys of the step's processes (bash's `times`, which counts each process once it is waited
# for); on a loaded machine it is the steadier figure.
set -uo pipefail

make=${MAKE:-make}
logs=${LOGS:-build/test-logs}
built=() built_jobs=1
beside_from="" beside=()
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --built) read -r -a built <<< "${2:?--built needs the targets to build first}"; shift 2 ;;
    --built-jobs) built_jobs=${2:?--built-jobs needs a number}; shift 2 ;;
    --beside)
      beside_from=${2:?--beside needs the step to start beside}
      read -r -a beside <<< "${3:?--beside needs the steps to run beside it}"
      shift 3 ;;
    *) echo "timed_steps.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if ! [[ $built_jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "timed_steps.sh: --built-jobs $built_jobs: expected a whole number from 1" >&2
  exit 2
fi
skip=()
for target in "${built[@]}"; do skip+=(-o "$target"); done
if [[ ${#beside[@]} -gt 0 && " $* " != *" $beside_from "* ]]; then
  echo "timed_steps.sh: --beside $beside_from: not one of the steps ($*)" >&2
  exit 2
fi

# The CPU seconds (user + sys) of this shell's children so far, in CPU: the second line of `times`
# ("XmY.YYYs XmY.YYYs"), which must run in this shell, not in a $(...) subshell.
times_file=$(mktemp)
lane_rows=$(mktemp)
lane_pid=""
# The lane runs in a process group of its own (below), which this stops, all of it.
stop_lane() { [[ -z $lane_pid ]] || kill -TERM -- -"$lane_pid" 2> /dev/null; }
trap 'stop_lane; rm -f "$times_file" "$lane_rows"' EXIT
trap 'exit 130' INT TERM
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
# run_step NAME COMMAND...: runs it, adds its row to `rows`, and says how it went.
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
  rows+=("$(printf '%-24s %7d %7d   %4s -> %-4s  %s' "$name" "$wall" "$cpu" "$load_start" "$(load)" "$result")")
  echo "== make test: $name: $result, ${wall} s wall, ${cpu} s CPU"
  return $status
}

# The lane: each of its steps in turn, niced, its output in $logs/STEP.log; its rows go to
# $lane_rows for the table, and it stops at the first step that fails.
run_lane() {
  set +m  # its steps stay in its process group
  trap - EXIT INT TERM
  times_file=$(mktemp)  # its own: `times` here and in the main line run at the same moments
  rows=()  # this subshell's copy of the parent's, emptied: the lane reports its own
  : > "$lane_rows"
  mkdir -p "$logs"
  local step
  for step in "${beside[@]}"; do
    run_step "$step (beside)" nice -n 10 "$make" --no-print-directory "${skip[@]}" "$step" \
      > "$logs/$step.log" 2>&1 < /dev/null
    local step_status=$status
    printf '%s\n' "${rows[-1]}" >> "$lane_rows"  # each as it ends: a stopped lane keeps them
    [[ $step_status -eq 0 ]] || break
  done
  rm -f "$times_file"
  exit $status
}
# Waits for the lane, prints its steps' output, and takes its rows and exit status.
join_lane() {
  [[ -n $lane_pid ]] || return 0
  wait "$lane_pid"
  local lane_status=$? step
  lane_pid=""
  [[ $lane_status -lt 128 ]] || echo "== make test: the lane was stopped (${beside[*]})"
  for step in "${beside[@]}"; do
    [[ -f "$logs/$step.log" ]] || continue
    echo "== make test: the output of $step (run beside the steps from $beside_from on)"
    cat "$logs/$step.log"
  done
  mapfile -t -O "${#rows[@]}" rows < "$lane_rows"
  return $lane_status
}

report() {
  children_cpu
  echo
  echo "== make test: time per step (CPU: user + sys of the step's processes; load: 1-minute average)"
  printf '%-24s %7s %7s   %s\n' step "wall s" "CPU s" "load start -> end"
  printf '%s\n' "${rows[@]}"
  printf '%-24s %7d %7.0f\n' total "$SECONDS" "$CPU"
}

# Ends the run: the lane joined, the table printed, the first failure's status (or 0).
finish() {
  local failed=$1
  [[ $failed -eq 0 ]] || stop_lane
  join_lane
  local lane_status=$?
  report
  [[ $failed -ne 0 ]] && exit "$failed"
  exit $lane_status
}

if [[ ${#built[@]} -gt 0 ]]; then
  run_step builds "$make" --no-print-directory -j"$built_jobs" "${built[@]}" || finish $status
fi
for step in "$@"; do
  if [[ $step == "$beside_from" && ${#beside[@]} -gt 0 ]]; then
    for lane_step in "${beside[@]}"; do rm -f "$logs/$lane_step.log"; done
    echo "== make test: ${beside[*]} start beside the steps from $step on (output under $logs)"
    set -m  # the lane in a process group of its own, which stop_lane can stop whole
    run_lane &
    lane_pid=$!
    set +m
  fi
  run_step "$step" "$make" --no-print-directory "${skip[@]}" "$step" || finish $status
done
finish 0
