#!/usr/bin/env bash
# Set up and run the test suite. Everything, cross-version replay, GCS and Ray end-to-end tests included (what CI
# runs); or, with --fast, the quick loop for development: without the tests marked crossversion, gcs, ray or slow
# (pyproject.toml registers the markers). Other arguments go to pytest. The tests run in REPROBUNDLE_TEST_WORKERS
# processes (default 3; 1 runs them in this process), each taking whole files, so a module's fixtures are built once.
# 3 on the project's 2-core VM: much of the suite waits (on subprocesses, servers, Ray, workers hung on purpose until
# their timeout), and a third process keeps both cores busy meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
args=()
for arg in "$@"; do
    if [[ "$arg" == "--fast" ]]; then
        args+=(-m "not crossversion and not gcs and not ray and not slow")
    else
        args+=("$arg")
    fi
done
# Bytecode caches on (where the environment turned them off): pytest's rewritten test modules and the package,
# which every worker and CLI subprocess of the suite imports again, are compiled once instead of each time.
unset PYTHONDONTWRITEBYTECODE
workers=${REPROBUNDLE_TEST_WORKERS:-3}
if [[ "$workers" != 1 ]]; then
    # whole files, in collection order: tests/conftest.py puts the longest first (xdist's default reorders by the
    # number of tests, which left the few-test, slowest files for the end, one process working while the other idled)
    args=(-n "$workers" --dist loadfile --no-loadscope-reorder "${args[@]}")
fi
exec .venv/bin/python -m pytest "${args[@]}"
