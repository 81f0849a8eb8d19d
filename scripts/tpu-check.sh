#!/usr/bin/env bash
# The TPU check of issue #50, on a machine with one TPU chip, JAX (with libtpu) on PYTHONPATH, no network and a
# package index of its own on disk (the borrowed TPU v5e machine): everything installs offline.
#   1. reprobundle's dependencies from wheels carried in TPU_CHECK_WHEELS (default .whl-tpu: see
#      docs/accelerators.md for the pip download line), the machine's JAX kept first on PYTHONPATH;
#   2. the devices reprobundle detects beside the ones JAX sees;
#   3. packs examples/attention.py on the TPU (the reference measured there, in a worker);
#   4. replays it on the installed release and on an environment of the same release built offline from the
#      machine's index (TPU_CHECK_INDEX, default file:///opt/pypi/simple): an A/A pair, visited in alternation, whose
#      verdict must be "same";
#   5. replays it beside an XLA flag variant of the installed release;
#   6. `envs --add-commit`: JAX's Python at TPU_CHECK_COMMIT (default 0145058aa, 2026-07-16) over the 0.10.2 TPU
#      environment, from a JAX repository carried in TPU_CHECK_JAX_REPO (default .jax-repo.git: a bare repository of
#      the commits from jax-v0.10.2 to that commit, made by scripts/jax-range-repo.sh); packs examples/empty_rows.py
#      and replays it retraced beside the installed release (jnp.empty's lowering changed on a TPU: outputs differ);
#   7. bisect-commits from 0.10.2 to the commit (the first bad commit of that change) and its issue; investigate
#      from 0.10.2 to the commit, and the reproducer it stores and the bundle's zip run on both sides;
#   8. attention timed on the installed release beside the commit (5 visits each: the two-version replay's time);
#   9. sweep of two bundles, installed against the commit; `changes` (libtpu's flags, by name);
#  10. writes the issue body of the attention bundle; first of all, runs tests/test_accelerators.py on the TPU.
#  visits (not by default): the two-version replay's time with JAX's compilation cache off and on (VISIT_CACHES),
#      then whether a second process may import jax, or open the chip, while one holds it.
# Usage: scripts/tpu-check.sh [OUT_DIR] (default tpu-check-DATE); STEPS="pack commit bisect ..." picks.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${1:-tpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STEPS=" ${STEPS:-tests pack aa variant commit bisect investigate timing sweep changes issue} "
INDEX=${TPU_CHECK_INDEX:-file:///opt/pypi/simple}
WHEELS=${TPU_CHECK_WHEELS:-$REPO/.whl-tpu}
JAX_REPO=${TPU_CHECK_JAX_REPO:-$REPO/.jax-repo.git}
COMMIT=${TPU_CHECK_COMMIT:-0145058aa}
SITE=${TPU_CHECK_SITE:-/tmp/reprobundle-site}
ROUNDS=${TPU_CHECK_ROUNDS:-5}
exec > >(tee -a "$OUT/log.txt") 2>&1
START=$(date +%s)
say() { echo "=== [$(( $(date +%s) - START )) s] $*"; }
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
check() {  # check NAME COMMAND...: run it, record ok/FAILED with its seconds
  local name=$1; shift
  local t0; t0=$(date +%s)
  say "$name: $*"
  if "$@"; then echo "ok      $name ($(( $(date +%s) - t0 )) s)" >> "$SUMMARY"
  else echo "FAILED  $name ($(( $(date +%s) - t0 )) s)" >> "$SUMMARY"; fi
}
want() { [[ "$STEPS" == *" $1 "* ]]; }

say "machine"
python3 -c 'import platform, sys; print(sys.version.split()[0], platform.libc_ver(), platform.machine())'
echo "PYTHONPATH=${PYTHONPATH:-}"; env | grep -E '^(TPU_|LIBTPU|JAX_)' | sed 's/=.*TOKEN.*/=<redacted>/' || true
nproc; ls -l /dev/vfio /dev/accel* 2>/dev/null | head
for dev in /sys/bus/pci/devices/*; do
  [ "$(cat "$dev/vendor" 2>/dev/null)" = 0x1ae0 ] && echo "google pci $(basename "$dev"): device $(cat "$dev/device") class $(cat "$dev/class")"
done

say "reprobundle's dependencies, offline (machine JAX first on PYTHONPATH)"
if [ -d "$WHEELS" ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" "$WHEELS"/*.whl || exit 1
fi
# TPU_CHECK_CODE: another checkout's reprobundle (an earlier commit's, carried) run by this script: a before/after
CODE=${TPU_CHECK_CODE:-$REPO}
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SITE:$CODE"
# the store outlives one OUT_DIR (a later call on the same machine goes on from its bundles and answers)
export REPROBUNDLE_STORE="${TPU_CHECK_STORE:-/tmp/reprobundle-tpu-store}" REPROBUNDLE_INDEX_URL="$INDEX"
export PYTHONUNBUFFERED=1
RB=(python3 -m reprobundle)
"${RB[@]}" --help >/dev/null || { echo "reprobundle does not start here" >&2; exit 1; }

say "devices: reprobundle's detection, and JAX's own (a process that exits before the next opens the chip)"
python3 -c 'from reprobundle.envs.platforms import detect_devices; d = detect_devices(); print("reprobundle:", d.describe(), d.platforms)'
python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'

if want tests; then
  check "tests/test_accelerators.py on the TPU" env -u REPROBUNDLE_INDEX_URL python3 -m pytest -q -p no:cacheprovider \
    tests/test_accelerators.py
fi
if want pack && ! "${RB[@]}" show attention > /dev/null 2>&1; then
  check "pack on the TPU" "${RB[@]}" pack examples/attention.py --name attention
  "${RB[@]}" show attention | tee "$OUT/show.txt"
fi
if want aa; then
  check "A/A: installed against 0.10.2 built offline ($ROUNDS rounds)" \
    sh -c "\"\$@\" > $OUT/aa.json" _ "${RB[@]}" replay attention --jax installed --jax 0.10.2 --rounds "$ROUNDS" --json
  python3 - "$OUT/aa.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
c = json.load(open(sys.argv[1]))
rows = c.get("rows") or c.get("comparison", {}).get("rows") or []
for r in rows:
    print("   A/A row:", r.get("label"), r.get("status"), "verdict", r.get("verdict"), "ratio", r.get("ratio"),
          "platform", r.get("platform"))
EOF
fi
if want variant; then
  # algsimp off changes the TPU's numerics: outputs beyond the tolerance, which replay's exit code says (9, a
  # mismatch; as the commit step below expects); both ran, and the variant's outputs differ
  check "installed beside an XLA flag variant (outputs differ: exit 9)" sh -c '"$@"; [ $? -eq 9 ]' _ \
    "${RB[@]}" replay attention \
    --jax installed --variant "installed:XLA_FLAGS=--xla_disable_hlo_passes=algsimp" --rounds 3
fi
if want commit || want bisect || want investigate || want timing || want sweep; then
  # JAX's Python at a commit after the installed release, over the release's TPU environment (jax[tpu] 0.10.2 with
  # libtpu, built offline from the machine's index): the one second version that can meet the installed one here
  if [ ! -d "$JAX_REPO" ]; then echo "no JAX repository at $JAX_REPO (TPU_CHECK_JAX_REPO)" >&2; fi
  check "a kept environment of JAX at $COMMIT over jax 0.10.2" sh -c "\"\$@\" > $OUT/commit-env.json" _ \
    "${RB[@]}" envs --add-commit "$COMMIT" --over 0.10.2 --jax-repo "$JAX_REPO" --json
  COMMIT_ENV=$(python3 -c 'import json, sys
def paths(d):
    if isinstance(d, dict):
        for k, v in d.items():
            if k == "path" and isinstance(v, str): yield v
            yield from paths(v)
    elif isinstance(d, list):
        for v in d: yield from paths(v)
print(next(paths(json.load(open(sys.argv[1]))), ""))' "$OUT/commit-env.json" 2>/dev/null)
  echo "commit environment: $COMMIT_ENV"; cat "$OUT/commit-env.json"; "${RB[@]}" envs
fi
if [ -n "${COMMIT_ENV:-}" ] && { want commit || want bisect || want investigate; }; then
  "${RB[@]}" show empty-rows > /dev/null 2>&1 ||
    check "pack examples/empty_rows.py on the TPU" "${RB[@]}" pack examples/empty_rows.py --name empty-rows
fi
if want commit && [ -n "${COMMIT_ENV:-}" ]; then
  # jnp.empty became an uninitialized AllocateBuffer on a TPU after 0.10.2: outputs beyond the tolerance (exit 1)
  check "empty-rows retraced: installed beside the commit (outputs differ: exit 9)" sh -c '"$@"; [ $? -eq 9 ]' _ \
    "${RB[@]}" replay empty-rows --jax installed --jax "$COMMIT_ENV" --mode retrace --rounds 1
fi
if want bisect && [ -n "${COMMIT_ENV:-}" ]; then
  check "bisect-commits empty-rows from 0.10.2 to $COMMIT" "${RB[@]}" bisect-commits empty-rows --good 0.10.2 \
    --bad "$COMMIT" --jax-repo "$JAX_REPO"
  "${RB[@]}" show empty-rows | tee -a "$OUT/show.txt"
  check "issue empty-rows" "${RB[@]}" issue empty-rows --jax-repo "$JAX_REPO" -o "$OUT/issue-empty-rows.md"
  head -40 "$OUT/issue-empty-rows.md" 2>/dev/null
fi
if want investigate && [ -n "${COMMIT_ENV:-}" ]; then
  # the chain from "it worked on 0.10.2 and broke at that commit" to the issue; then the issue's reproducer run on
  # both sides: exit 0 on the installed release, 1 under the commit
  if check "investigate empty-rows from 0.10.2 to $COMMIT" "${RB[@]}" investigate empty-rows --good 0.10.2 \
      --bad "$COMMIT" --jax-repo "$JAX_REPO" --issue "$OUT/investigate-issue.md"; then
    # the reproducer as a maintainer takes it: the issue body's python block
    [ -f "$OUT/investigate-issue.md" ] && python3 - "$OUT/investigate-issue.md" "$OUT/repro.py" <<'PY'
import re, sys
found = re.search(r"```python\n(.*?)\n```", open(sys.argv[1]).read(), re.S)
if found:
    open(sys.argv[2], "w").write(found.group(1) + "\n")
PY
    check "the issue's title names the first bad commit" grep -q "^### .* from JAX commit " "$OUT/investigate-issue.md"
    check "the issue's reproducer is the program (never the frozen module)" grep -q "^PROGRAM_FILES = " "$OUT/repro.py"
    if [ -f "$OUT/repro.py" ]; then
      check "the reproducer passes on the installed release" python3 "$OUT/repro.py"
      # PYTHONPATH (the machine's jax) would come before the environment's own packages: the commit's Python alone
      check "the reproducer fails under the commit (exit 1)" sh -c '"$@"; [ $? -eq 1 ]' _ env -u PYTHONPATH \
        "$COMMIT_ENV/bin/python" "$OUT/repro.py"
    fi
    # the attachment: the bundle's zip judges what the investigation found (#55), with only JAX beside it
    if check "export the bundle's zip" "${RB[@]}" export empty-rows -o "$OUT/empty-rows.zip"; then
      check "the zip passes on the installed release (exit 0)" python3 "$OUT/empty-rows.zip"
      check "the zip fails under the commit (exit 1)" sh -c '"$@"; [ $? -eq 1 ]' _ env -u PYTHONPATH \
        "$COMMIT_ENV/bin/python" "$OUT/empty-rows.zip"
    fi
  fi
fi
if want timing && [ -n "${COMMIT_ENV:-}" ]; then
  check "attention: installed beside the commit, $ROUNDS visits each" "${RB[@]}" replay attention --jax installed \
    --jax "$COMMIT_ENV" --rounds "$ROUNDS"
fi
if want sweep && [ -n "${COMMIT_ENV:-}" ]; then
  "${RB[@]}" pack examples/attention.py:make_small --name attention-small > /dev/null 2>&1
  check "sweep attention-small and empty-rows: installed against the commit" sh -c '"$@"; [ $? -le 9 ]' _ \
    "${RB[@]}" sweep attention-small empty-rows --baseline installed --candidate "$COMMIT_ENV" --rounds 2
fi
if want visits; then
  # #64: two versions, 5 visits each, before (JAX's compilation cache off: every visit compiles) and after (each
  # contender's visits share a persistent compilation cache: run/execution.compile_cache_env), back to back in one
  # call; each visit's start and end read from the progress lines. Then whether `import jax` takes the chip: a
  # second process imports jax while a first holds the chip (what starting a visit before the last ends needs).
  "${RB[@]}" envs --add 0.10.2 > /dev/null 2>&1
  for cache in ${VISIT_CACHES:-false true}; do
    t0=$(date +%s)
    check "two versions, $ROUNDS visits each, JAX_ENABLE_COMPILATION_CACHE=$cache" sh -c "\"\$@\" > $OUT/visits-$cache.json 2> $OUT/visits-$cache.log" _ \
      env JAX_ENABLE_COMPILATION_CACHE=$cache "${RB[@]}" replay attention --jax installed --jax 0.10.2 --rounds "$ROUNDS" --json
    echo "   visits with the compilation cache $cache: $(( $(date +%s) - t0 )) s wall" | tee -a "$SUMMARY"
    grep -E "visiting|timed [0-9]+ round" "$OUT/visits-$cache.log" | tail -12
    python3 - "$OUT/visits-$cache.json" <<'EOF2' | tee -a "$SUMMARY"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("runs", []):
    print("   ", r.get("requested"), r.get("status"), "median", r.get("median_ns"), "spent", r.get("spent"))
for r in d.get("comparison", {}).get("rows", []):
    print("   row", r.get("label"), r.get("verdict"), r.get("ratio"))
EOF2
  done
  python3 -c 'import jax, time; jax.devices(); print("holder has the chip", flush=True); time.sleep(15)' &
  holder=$!
  sleep 8
  python3 -c 'import time; t = time.time(); import jax; print("import jax beside the holder: %.1f s" % (time.time() - t), flush=True)
t = time.time()
try:
    jax.devices(); print("devices beside the holder: %.1f s" % (time.time() - t))
except Exception as e:
    print("devices beside the holder refused after %.1f s: %s" % (time.time() - t, str(e)[:200]))' 2>&1 | tee -a "$SUMMARY"
  wait $holder
  # whether a process refused the chip while another held it gets it once that one ends, in the same process (a
  # next visit could try again rather than wait for the last one's exit)
  python3 -c 'import jax, time; jax.devices(); print("holder has the chip", flush=True); time.sleep(6)' &
  holder=$!
  sleep 4
  python3 -c 'import time, jax
t = time.time(); n = 0
while True:
    try:
        jax.devices(); print("devices after %d refusals: %.1f s" % (n, time.time() - t)); break
    except Exception as e:
        n += 1
        if time.time() - t > 20: print("still refused after %.1f s: %s" % (time.time() - t, str(e)[:120])); break
        time.sleep(0.5)' 2>&1 | grep -v -i "hugepage\|warnings.warn" | tee -a "$SUMMARY"
  wait $holder
fi
if want changes; then
  check "changes: libtpu's flags of the release" "${RB[@]}" changes 0.10.2 0.10.2
fi
say "what a TPU run record says of its machine"
python3 - "$REPROBUNDLE_STORE" <<'PY'
import glob, sys, msgpack
for path in sorted(glob.glob(sys.argv[1] + "/runs/*/*.msgpack"))[-1:]:
    env = msgpack.unpackb(open(path, "rb").read(), raw=False).get("environment", {})
    print({k: v for k, v in env.items() if k not in ("conditions", "packages", "process")})
PY
grep -m3 -iE "model name|vendor_id|cpu family" /proc/cpuinfo || head -12 /proc/cpuinfo
if want issue; then
  check "issue" "${RB[@]}" issue attention -o "$OUT/issue.md"
  head -20 "$OUT/issue.md" 2>/dev/null
fi
say "done"
cat "$SUMMARY"
! grep -q FAILED "$SUMMARY"
