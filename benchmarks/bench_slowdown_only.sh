#!/bin/bash
# A time bisection's endpoints where the bad end is not slower (#57): tests/programs/retrace/faster_later.py frozen,
# jax 0.5.1 about 0.93x of 0.4.38's time. `bisect --by time` with this checkout's code and with OLD's (default
# 2a758a9, the commit before the endpoints stopped once a 5% slowdown is ruled out), alternating, twice each; then
# the two-sided replay of the same pair, the baseline measured in the same run. Prints each wall time and answer.
# Usage: benchmarks/bench_slowdown_only.sh [OLD_COMMIT]   (the releases cached: nothing is installed but them)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
old=${1:-2a758a9}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive "$old" reprobundle | tar -x -C "$work"
export REPROBUNDLE_STORE=$work/store
cli=("$root/.venv/bin/python" -m reprobundle)
"${cli[@]}" pack "$root/tests/programs/retrace/faster_later.py" --name fl --no-dump --no-profile >/dev/null 2>&1 || exit 1
timed() {  # label, then the command; run from $work so that `-m reprobundle` finds the code PYTHONPATH names
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  (cd "$work" && "$@") >"$work/out" 2>"$work/err"
  end=$(date +%s.%N)
  printf "%-8s %6.1f s  %s\n" "$label" "$(echo "$end - $start" | bc)" \
    "$(grep -E '^error' "$work/err" | head -1 | cut -c1-300)$(grep -m1 -E 'faster|slower|different' "$work/out")"
}
ask=(bisect fl --good 0.4.38 --bad 0.5.1 --by time --frozen)
for _ in 1 2; do
  timed new env PYTHONPATH="$root" "${cli[@]}" "${ask[@]}"
  timed old env PYTHONPATH="$work" "${cli[@]}" "${ask[@]}"
done
timed replay env PYTHONPATH="$root" "${cli[@]}" replay fl --jax 0.4.38 --jax 0.5.1
