#!/usr/bin/env bash
# Set up and run the whole test suite, cross-version replay and GCS end-to-end tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
