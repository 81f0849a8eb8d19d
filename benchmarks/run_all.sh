#!/usr/bin/env bash
# Run every benchmark; each prints its figures as ratios against a baseline measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p benchmarks/results
for b in bench_replay bench_e2e bench_pack bench_push bench_gcs bench_capture bench_sweep bench_sweep_shared bench_retrace bench_bisect bench_explain; do
  echo "== $b"
  .venv/bin/python "benchmarks/$b.py" 2>&1 | tee "benchmarks/results/$b.txt"
done
