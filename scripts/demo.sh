#!/usr/bin/env bash
# The main job on the default local store: pack the attention example and replay it on the installed JAX.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/reprobundle pack examples/attention.py --name attention --description "multi-head attention, f32"
.venv/bin/reprobundle replay attention
