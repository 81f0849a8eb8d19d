#!/usr/bin/env bash
# The main job on the default local store: pack the attention example on the installed JAX, then replay it on
# JAX 0.7.2 and 0.8.0 (each in its own environment, created on first use) and compare them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/reprobundle pack examples/attention.py --name attention --description "multi-head attention, f32"
# The figures below are this machine's: the README's came from 2-core VMs, and which way 0.8.0 moves depends on the CPU.
echo "this machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || uname -m)," \
     "$(getconf _NPROCESSORS_ONLN) CPUs, load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?');" \
     "the replay below measures it (its notes say under which conditions)"
.venv/bin/reprobundle replay attention --jax 0.7.2 --jax 0.8.0
