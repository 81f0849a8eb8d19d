#!/usr/bin/env bash
# Set up and run the test suite. Everything, cross-version replay, GCS and Ray end-to-end tests included (what CI
# runs); or, with --fast, the quick loop for development: without the tests marked crossversion, gcs, ray or slow
# (pyproject.toml registers the markers). Other arguments go to pytest.
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
exec .venv/bin/python -m pytest "${args[@]}"
