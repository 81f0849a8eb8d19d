#!/usr/bin/env bash
# Create .venv (Python >= 3.11) with reprobundle and its test dependencies. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "reprobundle needs Python >= 3.11 (set PYTHON=...)" >&2; exit 1; }
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check uv
UV_PYTHON_DOWNLOADS=never .venv/bin/python -m uv pip install -q --python .venv/bin/python -e '.[test]'
