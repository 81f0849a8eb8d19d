#!/usr/bin/env bash
# The main job on the default local store: pack the attention example on the installed JAX, then replay it on
# JAX 0.7.2 and 0.8.0 (each in its own environment, created on first use) and compare them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/reprobundle pack examples/attention.py --name attention --description "multi-head attention, f32"
.venv/bin/reprobundle replay attention --jax 0.7.2 --jax 0.8.0
