#!/usr/bin/env bash
# The GPU check of issue #16, on a machine with one NVIDIA GPU and access to PyPI (under ten minutes when the
# network is fast; the CUDA wheels are ~3 GB the first time):
#   1. creates the CUDA environments of two JAX releases (GPU_CHECK_VERSIONS, default "0.7.2 0.8.0"),
#   2. packs examples/attention.py on the GPU (and a cuda,cpu bundle, replayed on the CPU for its numerics),
#   3. replays the GPU bundle on both releases, timed together,
#   4. writes everything to a folder (default gpu-check-DATE): log, devices, environments, the bundle, the
#      comparison (text, Markdown, HTML, JSON) and summary.txt, whose checks decide the exit status.
# Usage: scripts/gpu-check.sh [OUT_DIR]
# GPU_CHECK_PLATFORM=cpu runs the same flow on a CPU (a dry run of this script, not of the GPU).
# GPU_CHECK_PYTHON=/path/to/python: a machine without PyPI whose interpreter already has JAX with its GPU build and
# reprobundle's dependencies (PYTHONPATH may point at them): no environment is made, and both contenders are that
# interpreter's JAX ("installed installed": two identical versions timed together, so the verdict must be "same").
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${1:-gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
OFFLINE_PYTHON=${GPU_CHECK_PYTHON:-}
DEFAULT_VERSIONS="0.7.2 0.8.0"
[ -z "$OFFLINE_PYTHON" ] || DEFAULT_VERSIONS="installed installed"
read -r -a VERSIONS <<< "${GPU_CHECK_VERSIONS:-$DEFAULT_VERSIONS}"
PLATFORM=${GPU_CHECK_PLATFORM:-cuda}
[ "${#VERSIONS[@]}" -eq 2 ] || { echo "GPU_CHECK_VERSIONS must name two releases" >&2; exit 2; }
exec > >(tee "$OUT/log.txt") 2>&1
START=$(date +%s)
say() { echo "=== [$(( $(date +%s) - START )) s] $*"; }
export REPROBUNDLE_STORE="$OUT/store"  # a fresh store; environments stay in the usual cache (REPROBUNDLE_ENV_DIR)
export XLA_PYTHON_CLIENT_PREALLOCATE=false

say "machine"
if [ "$PLATFORM" = cuda ]; then
  command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs an NVIDIA GPU and its driver" >&2; exit 2; }
  nvidia-smi | tee "$OUT/nvidia-smi.txt"
fi

if [ -n "$OFFLINE_PYTHON" ]; then
  HOST_PY=$OFFLINE_PYTHON
else
  say "reprobundle's development environment (scripts/setup.sh)"
  [ -n "${GPU_CHECK_SKIP_SETUP:-}" ] || scripts/setup.sh
  HOST_PY=.venv/bin/python
fi
UV=("$HOST_PY" -m uv)
HOST_JAX=$("$HOST_PY" -c 'import importlib.metadata as m; print(m.version("jax"))')

say "devices, and the CUDA build each release gets here"
"$HOST_PY" - "$PLATFORM" "${VERSIONS[@]}" <<'EOF' | tee "$OUT/devices.txt"
import sys
from reprobundle.envs.manager import EnvironmentManager
from reprobundle.envs.platforms import detect_devices
platform, versions = sys.argv[1], sys.argv[2:]
devices = detect_devices()
print("devices:", devices.describe(), "| platforms:", ",".join(devices.platforms), "| CUDA driver:", devices.cuda_driver())
if platform not in devices.platforms:
    sys.exit(f"reprobundle finds no {platform} device here")
manager = EnvironmentManager()
for v in versions:
    if v == "installed":
        continue
    plan = manager.plan(v, platform=platform)
    print(f"jax {plan['version']}: {plan['build']} ({plan['name']}): {' '.join(plan['requirements'])}")
EOF

if [ -n "$OFFLINE_PYTHON" ]; then
RB=("$OFFLINE_PYTHON" -m reprobundle)
PACK_PY=$OFFLINE_PYTHON
else
say "the packing interpreter: jax $HOST_JAX with its $PLATFORM build, in $OUT/host (the .venv is left as it is)"
HOST_BUILD=$(.venv/bin/python -c "
from reprobundle.envs.manager import EnvironmentManager
print(EnvironmentManager().plan('$HOST_JAX', platform='$PLATFORM')['build'])")
JAX_REQ="jax==$HOST_JAX"
[ "$HOST_BUILD" = cpu ] || JAX_REQ="jax[$HOST_BUILD]==$HOST_JAX"
"${UV[@]}" venv --quiet --python .venv/bin/python "$OUT/host"
UV_PYTHON_DOWNLOADS=never "${UV[@]}" pip install --quiet --python "$OUT/host/bin/python" -e "$REPO" "$JAX_REQ"
RB=("$OUT/host/bin/reprobundle")
PACK_PY=$OUT/host/bin/python
fi
"$PACK_PY" -c "
import jax
print('packing on', jax.devices())
from reprobundle.worker.environment import lowering_platform
assert lowering_platform() == '$PLATFORM', 'the packing jax does not run on $PLATFORM'"

say "the $PLATFORM environments of jax ${VERSIONS[*]}"
for v in "${VERSIONS[@]}"; do
  [ "$v" != installed ] || continue
  t0=$(date +%s)
  "$PACK_PY" -c "
from reprobundle.api import environment_manager
env = environment_manager().ensure('$v', platform='$PLATFORM', progress=lambda line: print('   ', line, flush=True))
print('  ', env.path, env.build, env.jaxlib_version)"
  echo "  jax $v: $(( $(date +%s) - t0 )) s"
done
"${RB[@]}" envs | tee "$OUT/envs.txt"

say "pack examples/attention.py on the $PLATFORM device"
"${RB[@]}" pack examples/attention.py --name attention --description "gpu-check: multi-head attention, f32"
"${RB[@]}" pack examples/attention.py --name attention-mp --platforms "$PLATFORM,cpu" --description "gpu-check: cuda,cpu"
"${RB[@]}" show attention | tee "$OUT/show.txt"
"${RB[@]}" export attention -o "$OUT/attention.zip"

say "replay on jax ${VERSIONS[0]} and ${VERSIONS[1]}, timed together on the $PLATFORM device"
set +e
"${RB[@]}" replay attention --jax "${VERSIONS[0]}" --jax "${VERSIONS[1]}" --repeat 60 --rounds 6 \
  --report "$OUT/comparison.md" --html "$OUT/comparison.html" --json > "$OUT/replay.json"
echo "replay exit code: $?"
"${RB[@]}" compare attention --jax "${VERSIONS[0]}" --jax "${VERSIONS[1]}" | tee "$OUT/comparison.txt"
say "the cuda,cpu bundle on the CPU (numerics; the reference ran on the GPU)"
"${RB[@]}" replay attention-mp --jax "${VERSIONS[1]}" --platform cpu --repeat 10 > "$OUT/cpu-replay.txt" 2>&1
echo "cpu replay exit code: $?"
cat "$OUT/cpu-replay.txt"
[ "$PLATFORM" = cuda ] && nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv \
  > "$OUT/gpu-processes-after.txt"
set -e

say "summary"
"$PACK_PY" - "$OUT" "$PLATFORM" "$HOST_JAX" "${VERSIONS[@]}" <<'EOF' | tee "$OUT/summary.txt"
import json, os, sys
from reprobundle.bundle.registry import Registry
out, platform, host_jax, versions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
registry = Registry.open(os.environ["REPROBUNDLE_STORE"])
bundle = registry.resolve("attention")
env = bundle.manifest["environment"]
checks = []
def check(ok, what):
    checks.append(ok)
    print(("ok    " if ok else "FAIL  ") + what)
check(env.get("platform") == platform, f"packed on {env.get('platform')} ({env.get('device_kind')}, "
      f"{json.dumps(env.get('accelerator', {}).get('driver'))} driver, cuDNN {env.get('accelerator', {}).get('cudnn')})")
check(bool(bundle.manifest["reference"].get("per_op")), "the reference has a per-op table")
runs = sorted(registry.runs(bundle.ref.bundle_id), key=lambda r: r.get("created", ""))
for i, v in enumerate(versions):
    r = ([r for r in runs if r["requested"] == v][versions[:i].count(v):] or [None])[0]
    if r is None:
        check(False, f"jax {v}: no run recorded")
        continue
    e = r["environment"]
    check(r["status"] == "ok", f"jax {v}: {r['status']} {r['reason'][:200]}")
    check(e.get("platform") == platform and e.get("jax") == (host_jax if v == "installed" else v), f"jax {v}: ran on {e.get('platform')} "
          f"({e.get('device_kind')}), jax {e.get('jax')}, route {r.get('route')}")
    per_op = r.get("per_op") or []
    check(bool(per_op), f"jax {v}: per-op table of {len(per_op)} ops, top: "
          + ", ".join(f"{p['name']} {p['time_ns'] / 1e3:.1f} us" for p in per_op[:3]))
    check("xla_dump" in (r.get("artifacts") or {}), f"jax {v}: XLA dump kept")
try:
    comparison = json.load(open(os.path.join(out, "replay.json")))["comparison"]
    for h in comparison["headlines"]:
        print("headline:", h["text"])
    for d in comparison["diffs"]:
        print(f"where the time moved ({d['label']} vs {d['vs']}):", d["moved"])
except (OSError, ValueError, KeyError, TypeError) as e:
    check(False, f"replay.json: {e}")
leftover = open(os.path.join(out, "gpu-processes-after.txt")).read().splitlines()[1:] if platform == "cuda" else []
check(not leftover, "no process holds the GPU after the replay" + (f": {leftover}" if leftover else ""))
print(f"{sum(checks)}/{len(checks)} checks passed")
sys.exit(0 if all(checks) else 1)
EOF
say "done: $OUT"
