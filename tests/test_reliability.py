"""Reliability and security battery: crashes, races, corruption, secrets and containment, all for real.

Real CLI subprocesses killed with real SIGKILLs, real concurrent processes on a folder store and on the GCS test
server, real corrupted bytes, real secret-laden environments, real interpreters that segfault, hang or run out
of memory. The only seam is the environment manager in the containment tests (it hands out interpreters; the
worker subprocess, its timeout and its memory limit are the product's own).

About 3 minutes on 2 cores (most of it the 104 SIGKILLed CLI processes, each paying its interpreter start): packs
use `--repeat 1 --warmup 0 --no-dump`, several victims run at once, and one set of concurrent real packs (8 at once,
beside a `gc --grace 0` loop) doubles as the source of the crash campaigns. The untrusted-input fuzzing lives in
tests/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_runner import cli
from manifests import make_manifest

from reprobundle.bundle import manifest as mf
from reprobundle.bundle.registry import Registry, blob_key
from reprobundle.errors import EnvironmentCreationError

ROOT = Path(__file__).parent.parent
EXE = str(Path(sys.executable).with_name("reprobundle"))
FAST_PACK = ["--repeat", "1", "--warmup", "0", "--no-dump"]
SEED = int(os.environ.get("REPROBUNDLE_CRASH_SEED", "20261130"))

TINY = """\
import jax, jax.numpy as jnp, numpy as np


def make():
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    return jax.jit(lambda a, b: (jnp.tanh(a @ b), (a * 2).sum())), (x, x.T.copy())
"""


def sub_env(tmp: Path, **extra) -> dict[str, str]:
    """Environment of a CLI subprocess: CPU JAX, temp files and the blob cache under `tmp`."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TMPDIR": str(tmp), "REPROBUNDLE_CACHE_DIR": str(tmp / "cache")}
    env.pop("REPROBUNDLE_DEBUG", None)
    env.update(extra)
    return env


def workers_alive(marker: str, *, running_only: bool = False) -> list[int]:
    """Pids of worker processes whose command line mentions `marker` (their job folder is under our TMPDIR).
    running_only: only those past the launcher (exec'd into the worker), which PR_SET_PDEATHSIG covers; a launcher
    whose host is already gone exits by itself once its interpreter is up (seconds, on a loaded machine)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"reprobundle/worker" in cmd and marker.encode() in cmd and not (running_only and b"\x00-c\x00" in cmd):
            found.append(int(pid))
    return found


# ------------------------------------------------------------------------------- the source of the campaigns


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """8 real `reprobundle pack` processes of one name into one folder store, all at once (timed: the kill campaigns
    use the measured durations), beside a `gc --delete --grace 0` loop that keeps deleting every unreferenced blob
    no running writer holds, while it puts back, unreferenced and two days old, the blobs of an earlier pack of the
    same script: the packs keep finding their function and input blobs already stored and stale, the case where a
    pack that reuses a blob races gc. Plus a wide bundle of 64 blobs for the push campaigns."""
    from reprobundle.bundle import sharing

    base = tmp_path_factory.mktemp("source")
    store = base / "store"
    script = base / "tiny.py"
    script.write_text(TINY)
    env = sub_env(base / "tmp")
    done = subprocess.run([EXE, "pack", str(script), "--name", "tiny", *FAST_PACK, "--store", str(store), "--json"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    seeds = {key: (store / key).read_bytes() for key in Registry.open(store).store.list("blobs")}
    shutil.rmtree(store / "bundles")
    old = time.time() - 2 * 86400
    for key in seeds:
        os.utime(store / key, (old, old))
    first_write: list[float] = []
    stop = threading.Event()
    gc_stats = {"runs": 0, "deleted": 0, "leased": 0, "reseeded": 0, "errors": []}

    def collector():
        while not stop.is_set():
            try:
                data = sharing.gc(str(store), delete=True, grace_s=0)
                gc_stats["runs"] += 1
                gc_stats["deleted"] += data["count"]
                gc_stats["leased"] += data["kept"]["leased"]
            except Exception as e:  # noqa: BLE001 - reported by the test
                gc_stats["errors"].append(f"{type(e).__name__}: {e}")
            for key, data in seeds.items():  # back, unreferenced and old: the next pack may reuse it
                path = store / key
                if not path.exists():
                    tmp = path.with_name(f".seed-{uuid.uuid4().hex}")
                    tmp.write_bytes(data)
                    os.utime(tmp, (old, old))
                    os.replace(tmp, path)
                    gc_stats["reseeded"] += 1
            time.sleep(0.05)

    t0 = time.monotonic()

    def watch():
        while not stop.is_set() and not first_write:
            if any((store / "bundles").glob("tiny/*.msgpack")) or list((store / ".tmp").glob("lease-*")):
                first_write.append(time.monotonic() - t0)
            time.sleep(0.01)

    def packer(_):
        start = time.monotonic()
        done = subprocess.run([EXE, "pack", str(script), "--name", "tiny", *FAST_PACK, "--store", str(store),
                               "--json"], env=env, capture_output=True, text=True, timeout=600)
        return done.returncode, done.stdout, done.stderr, time.monotonic() - start

    threads = [threading.Thread(target=f, daemon=True) for f in (watch, collector)]
    for t in threads:
        t.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(packer, range(8)))
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    registry = Registry.open(store)
    # A bundle with many blobs, so a push spends most of its time writing blobs (where a kill is interesting).
    m = make_manifest(registry, name="wide")
    rng = random.Random(SEED)
    m["artifacts"] = {f"a{i:03d}": {"blob": registry.put_blob(rng.randbytes(16 << 10)), "media_type": "x/y"}
                      for i in range(64)}
    registry.publish(m)
    registry.close()
    durations = sorted(r[3] for r in runs if r[0] == 0)
    return SimpleNamespace(store=store, script=script, runs=runs, durations=durations, gc=gc_stats,
                           t_full=durations[len(durations) // 2] if durations else 10.0,
                           t_first=first_write[0] if first_write else 0.0)


@pytest.mark.slow
def test_concurrent_cli_packs_of_one_name(source):
    """8 real `reprobundle pack` processes of one name at once, beside a gc loop (`--grace 0`: only the packs'
    leases protect what they have not published) that deletes and puts back stale copies of their blobs: all 8
    succeed with distinct versions 1..8, each complete and intact; gc ran throughout, deleted what no pack held,
    and saw the packs' leases."""
    assert all(code == 0 for code, *_ in source.runs), [err[-500:] for code, _, err, _ in source.runs if code]
    versions = sorted(json.loads(out)["version"] for _, out, _, _ in source.runs)
    assert versions == list(range(1, 9))
    registry = Registry.open(source.store)
    assert registry.versions("tiny") == versions
    ids = {registry.load("tiny", v).ref.bundle_id for v in versions}
    assert len(ids) == 8
    for v in versions:
        assert registry.verify(registry.load("tiny", v)) == []
    stats = source.gc
    print(f"\ngc beside 8 packs: {stats}")
    assert not stats["errors"], stats["errors"][:3]
    assert stats["runs"] >= 10 and stats["deleted"] > 0 and stats["reseeded"] > 0, stats
    assert stats["leased"] > 0, "gc never saw a running pack's lease: the race was not exercised"
    code, out, err = cli("gc", "--delete", "--grace", "0", "--json", store=source.store)
    assert code == 0, err
    for v in versions:
        assert registry.verify(registry.load("tiny", v)) == []


# -------------------------------------------------------------------------------------- crash consistency


def count_files(dest: str):
    """A probe of how far a writer got: the number of files under a store (temp files included)."""
    if "://" in dest:
        from reprobundle.store import open_store

        store = open_store(dest)
        return lambda: sum(1 for _ in store.list())
    return lambda: sum(len(files) for _, _, files in os.walk(dest))


def kill_campaign(victims: list[dict], env: dict, parallel: int) -> list[dict]:
    """Run each victim's command and SIGKILL it (the CLI process only, as a crash would), `parallel` at a time:
    - "time" victims at a random delay (uniform in [0, measured full duration]): anywhere, startup included;
    - "progress" victims as soon as their destination holds `k` files (k uniform in [1, files of a full run - 1]):
      a random point of the writing phase whatever the machine's load, before the manifest by construction;
    - "worker" victims (packs) a random delay in [0, 0.5 s] after their worker subprocess started.
    Records whether a worker was running at the kill and whether any outlived the killed CLI by a second."""

    def one(v: dict) -> dict:
        start = time.monotonic()
        tmp = Path(env["TMPDIR"]) / f"victim-{uuid.uuid4().hex[:8]}"  # its workers' job folders name it
        tmp.mkdir(parents=True)
        proc = subprocess.Popen(v["cmd"], env={**env, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        if v["mode"] == "time":
            try:
                proc.wait(timeout=v["delay"])
            except subprocess.TimeoutExpired:
                pass
        elif v["mode"] == "worker":
            while proc.poll() is None and not workers_alive(str(tmp)):
                time.sleep(0.01)
            time.sleep(v["delay"])
        else:
            probe = count_files(v["dest"])
            while proc.poll() is None and probe() < v["k"]:
                time.sleep(0.005)
        had_worker = bool(workers_alive(str(tmp)))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        killed_at = time.monotonic()
        while workers_alive(str(tmp)) and time.monotonic() < killed_at + 15:
            if time.monotonic() > killed_at + 1.0 and workers_alive(str(tmp), running_only=True):
                break  # PR_SET_PDEATHSIG kills a running worker within milliseconds: this one outlived its host
            time.sleep(0.02)
        orphans = workers_alive(str(tmp))
        for pid in orphans:  # do not leave them running if the product regressed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return {**v, "rc": proc.returncode, "out": out, "err": err, "elapsed": time.monotonic() - start,
                "had_worker": had_worker, "orphan_workers": len(orphans)}

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, victims))


def plan(cmds_dests: list[tuple[list[str], str]], t_full: float, files_full: int, rng: random.Random,
         modes=("time", "progress", "progress")) -> list[dict]:
    """Victims cycling through `modes`, each with its random kill point."""
    out = []
    for i, (cmd, dest) in enumerate(cmds_dests):
        mode = modes[i % len(modes)]
        v = {"cmd": cmd, "dest": dest, "mode": mode}
        if mode == "time":
            v["delay"] = rng.uniform(0, t_full)
        elif mode == "worker":
            v["delay"] = rng.uniform(0, 0.5)
        else:
            v["k"] = rng.randint(1, max(1, files_full - 1))
        out.append(v)
    return out


def check_after_crashes(url: str) -> dict:
    """What crashes leave must be harmless and collectable:
    - `ls` lists only complete bundles: each one `verify`s;
    - `gc --delete` removes exactly the unreferenced blobs (and stale temp files), and afterwards every bundle
      still verifies and nothing unreferenced is left."""
    registry = Registry.open(url)
    code, out, err = cli("ls", "--json", store=url)
    assert code == 0, err
    rows = json.loads(out)
    refs = [r["ref"] for r in rows]
    live: set[str] = set()
    for ref in refs:
        code, out, err = cli("verify", ref, "--json", store=url)
        assert code == 0 and json.loads(out)["ok"], f"{url} {ref}: {out} {err}"
        live |= {blob_key(b["digest"]) for b in mf.blob_refs(registry.resolve(ref).manifest)}
    blobs = set(registry.store.list("blobs"))
    orphans = blobs - live
    tmp = Path(url) / ".tmp" if "://" not in url else None
    temp_files = sorted(tmp.iterdir()) if tmp is not None and tmp.is_dir() else []
    code, out, err = cli("gc", "--delete", "--grace", "0", "--json", store=url)
    assert code == 0, err
    assert {b["key"] for b in json.loads(out)["blobs"]} == orphans
    # Temp files of killed writers are kept while they might belong to a live writer (1 h); once stale they go.
    for p in temp_files:
        if p.exists():
            old = time.time() - 7200
            os.utime(p, (old, old))
    code, out, err = cli("gc", "--delete", "--grace", "0", "--json", store=url)
    assert code == 0 and json.loads(out)["count"] == 0, (out, err)
    if tmp is not None and tmp.is_dir():
        assert not list(tmp.iterdir()), f"temp files left in {tmp}"
    registry = Registry.open(url)
    assert set(registry.store.list("blobs")) == live
    assert registry.gc(dry_run=True, grace_s=0) == []
    for ref in refs:
        assert registry.verify(registry.resolve(ref)) == []
    assert [r["ref"] for r in json.loads(cli("ls", "--json", store=url)[1])] == refs
    return {"bundles": len(refs), "orphans": len(orphans), "temp_files": len(temp_files)}


def summarize(what: str, results: list[dict], stats: list[dict]) -> tuple[int, int]:
    killed = sum(r["rc"] == -signal.SIGKILL for r in results)
    partial = sum(bool(st["orphans"] or st["temp_files"]) for st in stats)
    by_mode = {m: sum(r["mode"] == m and r["rc"] == -9 for r in results) for m in ("time", "progress", "worker")}
    print(f"\n{what}: {len(results)} runs, {killed} SIGKILLed ({by_mode['time']} at a random time, "
          f"{by_mode['progress']} mid-write, {by_mode['worker']} mid-worker, "
          f"{sum(r['had_worker'] and r['rc'] == -9 for r in results)} with a worker running), "
          f"{sum(r['rc'] == 0 for r in results)} completed, {partial} left orphans or temp files, "
          f"{sum(st['bundles'] for st in stats)} complete bundles")
    progress = [r for r in results if r["mode"] == "progress"]
    assert sum(r["rc"] == -signal.SIGKILL for r in progress) >= 0.8 * len(progress)
    # Some progress kills land after the manifest (the probe lags the writer, a lot on GCS): a third is plenty.
    assert partial >= max(1, len(progress) // 3), "kills in the writing phase left nothing behind: campaign broken"
    return killed, partial


@pytest.mark.slow
def test_sigkill_pack_at_random_points(source, tmp_path):
    """SIGKILL `reprobundle pack` (a real CLI process) at 12 random points, 3 victims at a time: no half bundle
    is ever visible, a pack that reported success is there, gc collects what the rest left, a second pack into
    the crashed store works, and no worker outlives its killed host (they hold the accelerator)."""
    registry = Registry.open(source.store)
    files_full = len(mf.blob_refs(registry.resolve("tiny@1").manifest)) + 2  # + marker + manifest
    rng = random.Random(SEED)
    stores = [tmp_path / f"store{i:02d}" for i in range(12)]
    victims = plan([([EXE, "pack", str(source.script), "--name", "tiny", *FAST_PACK, "--store", str(st), "--json"],
                     str(st)) for st in stores], source.t_full, files_full, rng,
                   modes=("time", "progress", "worker", "progress"))
    env = sub_env(tmp_path / "tmp")
    results = kill_campaign(victims, env, parallel=3)
    assert all(r["rc"] in (0, -signal.SIGKILL) for r in results), [r["err"][-300:] for r in results]
    assert not any(r["orphan_workers"] for r in results), "a worker outlived its SIGKILLed `reprobundle pack`"
    assert any(r["had_worker"] and r["rc"] == -signal.SIGKILL for r in results), "no kill hit a running worker"
    stats = []
    for r, st in zip(results, stores):
        stats.append(check_after_crashes(str(st)))
        versions = Registry.open(st).versions("tiny")
        if r["rc"] == 0:
            assert versions == [json.loads(r["out"])["version"]] == [1]
        else:
            assert versions in ([], [1])  # killed after publishing (before printing): whole, verified above
    summarize("pack", results, stats)
    # A crashed store takes new packs as usual.
    crashed = next(st for st, r in zip(stores, results) if r["rc"] != 0)
    done = subprocess.run(victims[0]["cmd"][:-3] + ["--store", str(crashed), "--json"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert Registry.open(crashed).verify(Registry.open(crashed).resolve("tiny")) == []


def _push_campaign(source, dests: list[str], env: dict, parallel: int) -> None:
    src = Registry.open(source.store)
    refs = ["wide@1" if i % 2 else "tiny@1" for i in range(len(dests))]
    start = time.monotonic()  # one full push of the bigger bundle, to measure
    done = subprocess.run([EXE, "push", "wide@1", "--to", f"{dests[0]}-calib", "--store", str(source.store),
                           "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    t_full = time.monotonic() - start
    rng = random.Random(SEED + len(dests))
    victims = plan([([EXE, "push", ref, "--to", dest, "--store", str(source.store), "--json"], dest)
                    for ref, dest in zip(refs, dests)], t_full, 0, rng)
    for v, ref in zip(victims, refs):
        v["ref"] = ref
        if v["mode"] == "progress":
            v["k"] = rng.randint(1, len(mf.blob_refs(src.resolve(ref).manifest)) + 1)  # marker + blobs, no manifest
    results = kill_campaign(victims, env, parallel)
    stats = []
    for r in results:
        ref, dest = r["ref"], r["dest"]
        assert r["rc"] in (0, -signal.SIGKILL), r["err"][-500:]
        st = check_after_crashes(dest)
        stats.append(st)
        want = src.resolve(ref).ref.bundle_id
        if r["rc"] == 0 or st["bundles"]:  # done, or killed after the manifest was written: the bundle is whole
            assert st["bundles"] == 1 and Registry.open(dest).resolve(ref).ref.bundle_id == want
        # Pushing again after the crash completes it, and it is the same bundle.
        code, out, err = cli("push", ref, "--to", dest, "--json", store=source.store)
        assert code == 0, err
        assert json.loads(out)["bundle_id"] == want
        assert Registry.open(dest).verify(Registry.open(dest).resolve(ref)) == []
    summarize(f"push to {dests[0].rsplit('/', 1)[0]}", results, stats)


@pytest.mark.slow
def test_sigkill_push_local_to_local(source, tmp_path):
    """SIGKILL `reprobundle push` (folder -> folder) at 48 random points, 4 at a time."""
    dests = [str(tmp_path / f"dest{i:02d}") for i in range(48)]
    _push_campaign(source, dests, sub_env(tmp_path / "tmp"), parallel=4)


def test_sigkill_push_local_to_gcs(source, tmp_path, gcs_server):
    """SIGKILL `reprobundle push` (folder -> gs:// on the GCS test server) at 8 random points, 4 at a time (a
    GCS client costs seconds to start: the folder campaign carries the numbers)."""
    prefix = uuid.uuid4().hex[:12]
    dests = [gcs_server.url(f"crash/{prefix}/d{i:02d}") for i in range(8)]
    _push_campaign(source, dests, sub_env(tmp_path / "tmp", **gcs_server.env()), parallel=4)


# ------------------------------------------------------------------------------------------- concurrency


def _publisher(url: str, worker: int, n: int, queue) -> None:
    """One racing process: stores its own blobs, then publishes `n` manifests of one name."""
    try:
        registry = Registry.open(url)
        m = make_manifest(registry, name="race", payload=f"module of worker {worker}".encode())
        got = []
        for i in range(n):
            m["description"] = f"w{worker}-{i}"
            ref = registry.publish(m)
            got.append((m["description"], ref.version, ref.bundle_id))
        queue.put((worker, got, None))
    except BaseException as e:  # reported to the parent, which fails the test with it
        queue.put((worker, [], f"{type(e).__name__}: {e}"))


def race_publishes(url: str, processes: int = 8, each: int = 20) -> None:
    # Full packs would take minutes (each runs JAX twice); Registry.publish is the code path a pack ends with
    # (create-only manifest write racing for the next version), so the race is exercised with it directly.
    Registry.open(url).put_blob(b"store exists")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_publisher, args=(url, w, each, queue)) for w in range(processes)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [e for _, _, e in results if e]
    assert not errors, errors
    published = [item for _, got, _ in results for item in got]
    n = processes * each
    assert len(published) == n
    assert sorted(v for _, v, _ in published) == list(range(1, n + 1)), "a version was lost or given twice"
    assert len({d for d, _, _ in published}) == n and len({b for _, _, b in published}) == n
    for _, got, _ in results:
        assert [v for _, v, _ in got] == sorted(v for _, v, _ in got)
    registry = Registry.open(url)
    assert registry.versions("race") == list(range(1, n + 1))
    for description, version, bundle_id in random.Random(SEED).sample(published, 48):
        bundle = registry.load("race", version)
        assert (bundle.manifest["description"], bundle.ref.bundle_id) == (description, bundle_id)
    for version in random.Random(SEED).sample(range(1, n + 1), 16):
        assert registry.verify(registry.load("race", version)) == []


@pytest.mark.slow
def test_concurrent_publishes_local(tmp_path):
    """8 processes x 20 publishes of one name on a folder store: 160 distinct versions, none lost or doubled."""
    race_publishes(str(tmp_path / "store"))


def test_concurrent_publishes_gcs(gcs_store_url):
    """The same race on the GCS server (create-only = ifGenerationMatch=0)."""
    race_publishes(gcs_store_url)


# -------------------------------------------------------------------------------------------- secrets

SECRETS = {
    # Recorded by the worker (JAX_*, XLA_*, TF_CPP_*, LIBTPU_INIT_ARGS), so redaction is what keeps them out:
    "JAX_GCS_TOKEN": "ya29.a0AfH6SMBx3kQ9Zr8s7T1vB2nLmQ4pW5eR6tY7uI8oP9aS0dF1gH2jK3",
    "JAX_HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "XLA_GITHUB_TOKEN": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "JAX_SLACK_BOT": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "JAX_OPENAI_KEY": "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "JAX_AWS_ACCESS_KEY_ID": "AKIAQWERTYUIOPASDFGH",
    "JAX_AWS_SECRET_ACCESS_KEY": "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",
    "JAX_DB_PASSWORD": "correct-horse-battery-staple",
    "JAX_DB_PASS": "hunter2hunter2",
    "XLA_SIGNING_PASSPHRASE": "open sesame forty two",
    "JAX_CACHE_URL": "https://alice:s3cr3t-pw-42@cache.example.com/jax",
    "JAX_SERVICE_ACCOUNT": "/home/alice/.config/gcloud/application_default_credentials.json",
    "XLA_SSH_KEY_PATH": "/home/alice/.ssh/id_ed25519",
    "JAX_NETRC": "/home/alice/.netrc",
    "JAX_JWT": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3",
    "XLA_TLS_PRIVATE_KEY": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAo\n"
                           "-----END PRIVATE KEY-----",
    "JAX_AUTH_HEADER": "Bearer abcdef0123456789abcdef",
    "TF_CPP_API_KEY": "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
    "JAX_OPAQUE_VALUE": "q8Zt3LmW9xKp2VnR7sYb4HcJ6dFg1EaU0oTi5rQw",
    "LIBTPU_INIT_ARGS": "--xla_tpu_foo=true --auth=ghp_AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234",
    # A real XLA flag (XLA refuses unknown ones) whose value holds a token: XLA writes its flags into the dump's
    # *.debug_options and compile_options.textproto, so redaction must reach every file of the dump.
    "XLA_FLAGS": "--xla_gpu_cuda_data_dir=/home/alice/ghp_QQQQBBBBCCCCDDDDEEEEFFFFGGGGHHHH5678",
    # Not recorded at all, and must stay so:
    "AWS_SECRET_ACCESS_KEY": "Xq9rL2mN8vB4cZ7tY1wE5uI3oP6aS0dF2gH4jK8l",
    "GITHUB_TOKEN": "ghp_ZZZZYYYYXXXXWWWWVVVVUUUUTTTTSSSS9876",
    "HF_TOKEN": "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "DATABASE_URL": "postgres://bob:pg-pa55word@db.internal:5432/prod",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/alice/keys/service-account-prod.json",
    "NPM_TOKEN": "npm_1234567890abcdefghijABCDEFGHIJ123456",
    "MY_APP_SECRET": "totally-secret-value-1234",
}


def _needles(value: str) -> list[bytes]:
    """The value, and for long values a slice of its middle (a truncated or re-wrapped copy still counts)."""
    out = [value.encode()]
    if len(value) >= 16:
        mid = len(value) // 2
        out.append(value[mid - 6:mid + 6].encode())
    out += [line.encode() for line in value.splitlines() if len(line) >= 12]
    return out


def _all_bytes(path: Path) -> list[tuple[str, bytes]]:
    """Every file under `path` (or the file itself), and inside it: zip members (recursively) and gzip payloads."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    out = []

    def expand(label: str, data: bytes, depth: int = 0) -> None:
        out.append((label, data))
        if depth > 3:
            return
        if data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                for info in zf.infolist():
                    expand(f"{label}!{info.filename}", zf.read(info), depth + 1)
        elif data[:2] == b"\x1f\x8b":
            expand(f"{label}!gunzip", gzip.decompress(data), depth + 1)

    for p in files:
        expand(str(p), p.read_bytes())
    return out


def assert_no_secret(where: str, blobs: list[tuple[str, bytes]]) -> None:
    leaks = []
    for label, data in blobs:
        for name, value in SECRETS.items():
            for needle in _needles(value):
                if needle in data:
                    leaks.append(f"{name} ({needle[:24]!r}...) in {label}")
    assert not leaks, f"secrets leaked into {where}:\n" + "\n".join(leaks[:30])


@pytest.fixture(scope="module")
def secret_pack(tmp_path_factory):
    """A full real `reprobundle pack` (XLA dump, profile, HLO, source) run with a secret-laden environment."""
    base = tmp_path_factory.mktemp("secrets")
    store = base / "store"
    script = base / "tiny.py"
    script.write_text(TINY)
    env = sub_env(base / "tmp", **SECRETS)
    done = subprocess.run([EXE, "pack", str(script), "--name", "tiny", "--repeat", "3", "--warmup", "1",
                           "--store", str(store), "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(store=store, env=env, base=base, out=done.stdout + done.stderr)


def test_no_secret_reaches_the_store_or_any_output(secret_pack, tmp_path):
    """No secret value from the packing environment appears in any byte of the store (zips and gzips opened),
    in `show --json`, `url`, `ls --json`, an exported zip, nor after a real `reprobundle replay` in the same
    environment (its run record, its blobs, its --json output); and redaction did happen (the recorded
    variables are there, as <redacted>)."""
    store = secret_pack.store
    assert_no_secret("the pack's output", [("stdout+stderr", secret_pack.out.encode())])
    registry = Registry.open(store)
    m = registry.resolve("tiny").manifest
    assert "xla_dump" in m["artifacts"] and "profile_trace" in m["artifacts"]
    with zipfile.ZipFile(io.BytesIO(registry.get_blob(m["artifacts"]["xla_dump"]["blob"]))) as dump:
        options = [n for n in dump.namelist() if n.endswith((".debug_options", "compile_options.textproto"))]
        assert options, "the XLA dump holds no debug options: this test no longer shows the leak it guards against"
        assert all(b"xla_gpu_cuda_data_dir" in dump.read(n) and b"<redacted>" in dump.read(n) for n in options
                   if n.endswith(".debug_options"))
    recorded = m["environment"]["env_vars"]
    for name in ("JAX_GCS_TOKEN", "JAX_DB_PASS", "XLA_SIGNING_PASSPHRASE", "JAX_OPAQUE_VALUE", "LIBTPU_INIT_ARGS",
                 "XLA_FLAGS"):
        assert recorded.get(name) == "<redacted>", (name, recorded.get(name))
    assert_no_secret("the store after pack", _all_bytes(store))

    outputs = []
    for argv in (["show", "tiny", "--json"], ["show", "tiny"], ["url", "tiny"], ["url", "tiny", "--json"],
                 ["ls", "--json"], ["verify", "tiny", "--json"]):
        code, out, err = cli(*argv, store=store)
        assert code == 0, err
        outputs.append((" ".join(argv), (out + err).encode()))
    zpath = tmp_path / "tiny.zip"
    code, out, err = cli("export", "tiny", "-o", str(zpath), store=store)
    assert code == 0, err
    outputs.append(("export", (out + err).encode()))
    assert_no_secret("CLI output", outputs)
    assert_no_secret("the exported zip", _all_bytes(zpath))

    done = subprocess.run([EXE, "replay", "tiny", "--repeat", "2", "--warmup", "0", "--store", str(store), "--json"],
                          env=secret_pack.env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert_no_secret("replay output", [("replay --json", (done.stdout + done.stderr).encode())])
    runs = registry.runs(registry.resolve("tiny").ref.bundle_id)
    assert len(runs) == 1 and runs[0]["environment"]["env_vars"]["JAX_HF_TOKEN"] == "<redacted>"
    assert_no_secret("the store after replay", _all_bytes(store))
    code, out, err = cli("compare", "tiny", "--json", store=store)
    assert code == 0, err
    assert_no_secret("compare output", [("compare --json", (out + err).encode())])


# ------------------------------------------------------------------------------------------- corruption

# Every blob of a real bundle, by role. test_corruption_roles_cover_every_blob fails if the product adds one.
READ_BY_REPLAY = ["function.exported", "function.mlir_module", "function.mlir_module_compat",
                  "function.stablehlo_text", "inputs[0]", "inputs[1]", "outputs[0]", "outputs[1]"]
NOT_READ_BY_REPLAY = ["function.source", "artifacts.hlo_before", "artifacts.hlo_after", "artifacts.xla_dump",
                      "artifacts.profile_trace", "artifacts.profile_dir", "artifacts.stablehlo_lowered"]


def role_blob(m: dict, role: str) -> dict | None:
    kind, _, rest = role.partition(".")
    if kind == "function":
        return m["function"].get(rest)
    if kind.startswith("inputs["):
        return m["inputs"]["leaves"][int(kind[7:-1])].get("blob")
    if kind.startswith("outputs["):
        return m["reference"]["outputs"][int(kind[8:-1])]["blob"]
    art = m["artifacts"].get(rest)
    return art["blob"] if art else None


def test_corruption_roles_cover_every_blob(secret_pack):
    m = Registry.open(secret_pack.store).resolve("tiny").manifest
    covered = {role_blob(m, r)["digest"] for r in READ_BY_REPLAY + NOT_READ_BY_REPLAY if role_blob(m, r)}
    assert covered == {r["digest"] for r in mf.blob_refs(m)}, "a blob role is not covered by the corruption tests"
    assert set(m["artifacts"]) == {r.split(".", 1)[1] for r in NOT_READ_BY_REPLAY if r.startswith("artifacts.")}


@pytest.mark.parametrize("role", READ_BY_REPLAY + NOT_READ_BY_REPLAY)
def test_flipped_byte_in_any_blob_is_detected(secret_pack, tmp_path, role):
    """One flipped byte in this blob of a real bundle: `verify` exits 6 naming the blob; `replay` (for the blobs
    it reads) exits non-zero naming it, before running anything; `push` refuses it and publishes nothing."""
    store = tmp_path / "store"
    shutil.copytree(secret_pack.store, store)
    registry = Registry.open(store)
    blob = role_blob(registry.resolve("tiny").manifest, role)
    assert blob is not None, f"the packed bundle has no {role}"
    digest = blob["digest"]
    path = store / blob_key(digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))

    code, out, err = cli("verify", "tiny", store=store)
    assert code == 6 and digest in out, (out, err)
    code, out, err = cli("verify", "tiny", "--json", store=store)
    assert code == 6 and digest in json.loads(out)["problems"][0]
    if role in READ_BY_REPLAY:
        runs_before = len(registry.runs(registry.resolve("tiny").ref.bundle_id))
        code, out, err = cli("replay", "tiny", "--repeat", "1", "--warmup", "0", "--no-profile", store=store)
        assert code != 0 and digest in err and "Traceback" not in err, (code, err)
        assert len(Registry.open(store).runs(registry.resolve("tiny").ref.bundle_id)) == runs_before
    code, out, err = cli("push", "tiny", "--to", str(tmp_path / "dest"), store=store)
    assert code == 6 and digest in err, (code, err)
    assert Registry.open(tmp_path / "dest").versions("tiny") == []
    code, out, err = cli("export", "tiny", "-o", str(tmp_path / "x.zip"), store=store)
    assert code == 6 and digest in err and not (tmp_path / "x.zip").exists()


# ------------------------------------------------------------------------------------------- containment


class FakeEnvironments:
    """The environment-manager seam: hands out interpreters by "version". Everything after it is the product."""

    def __init__(self, pythons: dict[str, Path]) -> None:
        self.pythons = pythons
        self.asked: list[str] = []

    def ensure(self, version: str, progress=None):
        from reprobundle.envs.manager import JaxEnvironment

        self.asked.append(version)
        if version not in self.pythons:
            raise EnvironmentCreationError(f"no wheels of jax {version} for this platform")
        python = self.pythons[version]
        return JaxEnvironment(jax_version=version, python_executable=python, python_version="3.11",
                              path=python.parent, created=None, size_bytes=None)


def _interpreter(folder: Path, name: str, body: str) -> Path:
    """An executable `python` in its own folder: a shell script that runs the real interpreter on `body`."""
    d = folder / name / "bin"
    d.mkdir(parents=True)
    (d / "prog.py").write_text(body)
    exe = d / "python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{d / "prog.py"}" "$@"\n')
    exe.chmod(0o755)
    return exe


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory):
    """A real bundle packed in-process through the Python API (fast: no dump, no profile)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import reprobundle

    store = tmp_path_factory.mktemp("contain") / "store"
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    reprobundle.pack(jax.jit(lambda a: jnp.tanh(a @ a)), x, name="small", store=str(store), warmup=0, repeat=2,
                     dump=False, profile=False)
    return store


def _worker_timeout_s() -> float:
    """A workers' timeout well above what starting a worker's JAX takes on this machine now (measured here, so a
    loaded machine gets a longer one); a hung worker costs exactly this, once."""
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import jax; jax.numpy.zeros(8).block_until_ready()"], check=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=600)
    return float(max(12, round(10 * (time.monotonic() - t))))


@pytest.mark.slow
def test_crash_hang_and_garbage_workers_are_their_own_runs(small_bundle, tmp_path):
    """Versions whose worker segfaults, hangs (with a child of its own), exits with an error, writes a garbage
    result, or has no environment: each is its own failed run with a reason; the real versions before and after
    them complete; the hang's whole process group is killed; runs are stored; the comparison completes."""
    from reprobundle.api import comparison_of
    from reprobundle.run.execution import Timing
    from reprobundle.run.replay import replay

    pidfile = tmp_path / "hang-child.pid"
    starts = tmp_path / "hang.starts"
    envs = FakeEnvironments({
        "0.0.1-segv": _interpreter(tmp_path, "segv", "import ctypes\nctypes.string_at(0)\n"),
        "0.0.2-hang": _interpreter(tmp_path, "hang", (
            f"import subprocess, sys, time\nopen({str(starts)!r}, 'a').write('x')\n"
            f"child = subprocess.Popen(['sleep', '600'])\nopen({str(pidfile)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(600)\n")),
        "0.0.3-exit": _interpreter(tmp_path, "exit", "import sys\nprint('boom: no jaxlib here', file=sys.stderr)\n"
                                                     "sys.exit(3)\n"),
        "0.0.4-garbage": _interpreter(tmp_path, "garbage", "import sys\nopen(sys.argv[-1], 'wb').write(b'\\xc1' * 64)"
                                                           "\n"),
        "real": Path(sys.executable),
    })
    registry = Registry.open(small_bundle)
    bundle = registry.resolve("small")
    versions = ["installed", "0.0.1-segv", "0.0.2-hang", "0.0.3-exit", "0.0.4-garbage", "0.0.5-missing", "real"]
    timeout_s = _worker_timeout_s()
    # two fixed rounds: the test is about failed workers, not the adaptive budget (the two working versions are the
    # same build, so their verdict would run until the time limit without settling)
    runs = replay(registry, bundle, versions, timing=Timing(warmup=0, repeat=2, rounds=2), timeout_s=timeout_s,
                  dump=False, profile=False, env_manager=envs)
    by = {r["requested"]: r for r in runs}
    assert [r["requested"] for r in runs] == versions
    assert by["installed"]["status"] == "ok" and by["real"]["status"] == "ok", (by["installed"]["reason"],
                                                                                by["real"]["reason"])
    assert by["0.0.1-segv"]["status"] == "crashed" and "SIGSEGV" in by["0.0.1-segv"]["reason"]
    assert by["0.0.2-hang"]["status"] == "timeout" and f"did not finish within {timeout_s:.0f} s" in by["0.0.2-hang"]["reason"]
    assert by["0.0.3-exit"]["status"] == "crashed" and "code 3" in by["0.0.3-exit"]["reason"] \
        and "boom: no jaxlib here" in by["0.0.3-exit"]["reason"]
    assert by["0.0.4-garbage"]["status"] == "crashed" and "unreadable result" in by["0.0.4-garbage"]["reason"]
    assert by["0.0.5-missing"]["status"] == "error" and "no environment for jax" in by["0.0.5-missing"]["reason"]
    assert starts.read_text() == "x"  # the hung worker was started once and given up on, not waited for again
    child = int(pidfile.read_text())

    def child_alive() -> bool:
        try:
            return Path(f"/proc/{child}/cmdline").read_bytes() == b"sleep\x00600\x00"
        except OSError:
            return False

    deadline = time.monotonic() + 5
    while child_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not child_alive(), "the hung worker's child survived the timeout"
    stored = {r["requested"]: r["status"] for r in registry.runs(bundle.ref.bundle_id)}
    assert stored == {r["requested"]: r["status"] for r in runs}
    comparison = comparison_of(registry, bundle, runs)
    text = json.dumps(comparison, default=str)
    for v in versions:
        assert v in text
    from reprobundle.render import comparison as render

    for fmt in (render.to_text, render.to_markdown, render.to_html):
        assert fmt(comparison)


def _later_round_failure(folder: Path, name: str, failure: str) -> Path:
    """An interpreter that is the real one on its first start, and on later starts says ready, then `failure`."""
    counter = folder / f"{name}.starts"
    return _interpreter(folder, name, (
        "import os, signal, sys, time\n"
        f"counter = {str(counter)!r}\n"
        "starts = len(open(counter).read()) if os.path.exists(counter) else 0\n"
        "open(counter, 'a').write('x')\n"
        f"if starts == 0:\n    os.execv({sys.executable!r}, [{sys.executable!r}] + sys.argv[1:])\n"
        "print('ready 1000', flush=True)\n"
        "sys.stdin.readline()\n"
        + {"segv": "os.kill(os.getpid(), signal.SIGSEGV)\n", "hang": "time.sleep(600)\n"}[failure]))


@pytest.mark.slow
def test_a_worker_failing_in_a_later_round_leaves_the_others_measuring(small_bundle, tmp_path):
    """Interleaved rounds: a version whose worker crashes or hangs in round 2 of 3 is that version's run, with the
    round in its reason; the version timed beside it completes all its rounds."""
    from reprobundle.run.execution import Timing
    from reprobundle.run.replay import replay

    envs = FakeEnvironments({"0.0.1-segv-later": _later_round_failure(tmp_path, "segv", "segv"),
                             "0.0.2-hang-later": _later_round_failure(tmp_path, "hang", "hang")})
    registry = Registry.open(small_bundle)
    bundle = registry.resolve("small")
    runs = replay(registry, bundle, ["installed", "0.0.1-segv-later", "0.0.2-hang-later"],
                  timing=Timing(warmup=0, repeat=6, rounds=3), timeout_s=_worker_timeout_s(), dump=False, profile=False,
                  env_manager=envs)
    installed, segv, hang = runs
    assert installed["status"] == "ok", installed["reason"]
    assert installed["timing"]["rounds"] == [2, 2, 2]
    assert segv["status"] == "crashed" and "in round 2 of 3" in segv["reason"] and "SIGSEGV" in segv["reason"]
    assert hang["status"] == "timeout" and "in round 2 of 3" in hang["reason"]


def test_out_of_memory_worker_is_its_own_run(small_bundle):
    """The real worker under a 200 MiB address-space limit (RLIMIT_AS): JAX cannot even load; the run says
    error/crashed with a reason that names the memory limit; the comparison over the failed runs completes."""
    from reprobundle.api import comparison_of
    from reprobundle.run.execution import Timing
    from reprobundle.run.replay import replay

    registry = Registry.open(small_bundle)
    bundle = registry.resolve("small")
    envs = FakeEnvironments({"real": Path(sys.executable)})
    runs = replay(registry, bundle, ["installed", "real"], timing=Timing(warmup=0, repeat=2), timeout_s=120,
                  dump=False, profile=False, env_manager=envs, memory_limit_bytes=200 << 20)
    for run in runs:
        assert run["status"] in ("error", "crashed"), run
        assert "memory limit of 200 MiB" in run["reason"], run["reason"]
    text = json.dumps(comparison_of(registry, bundle, runs), default=str)
    assert all(f'"{r["requested"]}"' in text for r in runs)


# ------------------------------------------------------------------------------------------------ gc safety


def test_gc_never_deletes_what_it_cannot_read(tmp_path):
    """gc reads every manifest and run record before it deletes anything, and one it cannot read is reported (the
    key and why, in the output and in --json), never fatal: one that still decodes as a map (a newer reprobundle's,
    a schema violation) keeps every blob it mentions while the true orphans go; one whose bytes are garbage or
    truncated may reference any blob, so nothing is deleted while it is there. Repaired, the orphans go."""
    from reprobundle.bundle.digest import hex_of

    store = tmp_path / "store"
    registry = Registry.open(store)
    m = make_manifest(registry)
    ref = registry.publish(m)
    demo = {r["digest"] for r in mf.blob_refs(m)}
    key = "bundles/demo/1.msgpack"
    good = registry.store.get(key)

    def blobs() -> set[str]:
        return {"sha256:" + k.rsplit("/", 1)[-1] for k in registry.store.list("blobs")}

    def gc() -> tuple[dict, str]:
        registry.close()  # the blobs this test wrote are not held by a running writer
        code, out, err = cli("gc", "--delete", "--grace", "0", "--json", store=store)
        assert code == 0 and "Traceback" not in err, (code, out, err)
        return json.loads(out), err

    # A manifest from the future: read as a map, its blobs kept; the orphan goes.
    orphan = registry.put_blob(b"orphan")["digest"]
    registry.store.put(key, mf.encode({**mf.decode_manifest(good), "format_version": mf.MANIFEST_VERSION + 1}))
    data, _ = gc()
    assert [u["key"] for u in data["unreadable"]] == [key] and "format_version" in data["unreadable"][0]["reason"]
    assert {b["digest"] for b in data["blobs"]} == {orphan} and blobs() == demo
    code, out, _ = cli("gc", "--grace", "0", store=store)
    assert code == 0 and f"warning: could not read {key}" in out, out

    # A run record from the future: the blob it names stays.
    run_blob = registry.put_blob(b"an artifact of a run from the future")
    future_run = {"format": mf.RUN_FORMAT, "format_version": mf.RUN_VERSION + 1, "run_id": "r1",
                  "artifacts": {"trace": {"blob": run_blob, "media_type": "x/y"}}, "new_field": 1}
    run_key = f"runs/{hex_of(ref.bundle_id)}/r1.msgpack"
    registry.store.put(run_key, mf.encode(future_run))
    orphan = registry.put_blob(b"orphan 2")["digest"]
    data, _ = gc()
    assert {u["key"] for u in data["unreadable"]} == {key, run_key}
    assert {b["digest"] for b in data["blobs"]} == {orphan} and blobs() == demo | {run_blob["digest"]}

    # A truncated manifest may have named anything: nothing is deleted, and the output says why.
    orphan = registry.put_blob(b"orphan 3")["digest"]
    registry.store.put(key, good[: len(good) // 2])
    data, _ = gc()
    assert data["count"] == 0 and data["kept"]["unaccounted"] >= 1 and blobs() == demo | {orphan, run_blob["digest"]}
    code, out, _ = cli("gc", "--delete", "--grace", "0", store=store)
    assert code == 0 and "may reference any of them" in out and f"could not read {key}" in out, out
    assert orphan in blobs()

    # Repaired: the orphans are collected, the bundle is intact.
    registry.store.put(key, good)
    registry.store.delete(run_key)
    data, _ = gc()
    assert {b["digest"] for b in data["blobs"]} == {orphan, run_blob["digest"]} and not data["unreadable"]
    assert registry.verify(registry.resolve("demo")) == [] and blobs() == demo

# ------------------------------------------------------------------------------------------------ full disks


@contextlib.contextmanager
def _small_disk(folder: Path, size_kib: int):
    """A tmpfs of `size_kib` at `folder` (root, where mount works): yields True; else yields False and the caller
    limits file sizes instead (RLIMIT_FSIZE, SIGXFSZ ignored: a write past the limit fails with EFBIG)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)], capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(folder: Path, leave: int = 0) -> None:
    """Fill the disk of `folder` to its last byte, then free `leave` bytes (Python's tempfile skips a temp folder
    where it cannot write its probe, so a full temp folder is one with a page left)."""
    if leave:
        (folder / "reserve").write_bytes(b"\0" * leave)
    with open(folder / "filler", "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass
    if leave:
        (folder / "reserve").unlink()


def _fsize_limit(limit: int):
    def limit_files():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_files


@pytest.fixture(scope="module")
def packed_tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("disk")
    script = base / "tiny.py"
    script.write_text(TINY)
    store = base / "store"
    done = subprocess.run([EXE, "pack", str(script), "--name", "tiny", *FAST_PACK, "--store", str(store)],
                          env=sub_env(base / "tmp"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(base=base, script=script, store=store)


DISK_CASES = {  # what runs out of room -> (the command, which folder the message must name)
    "pack-store": (["pack", "{script}", "--name", "tiny2", *FAST_PACK, "--store", "{disk}/store"], "{disk}/store"),
    "pack-tmp": (["pack", "{script}", "--name", "tiny2", *FAST_PACK, "--store", "{store}"], "{disk}"),
    "pull": (["pull", "{store}/tiny@1", "--store", "{disk}/store"], "{disk}"),
    "export": (["export", "tiny@1", "-o", "{disk}/tiny.zip", "--store", "{store}"], "{disk}"),
    "replay-tmp": (["replay", "tiny@1", "--rounds", "1", "--repeat", "2", "--warmup", "0", "--store", "{store}"],
                   "{disk}"),
    "replay-store": (["replay", "tiny@1", "--rounds", "1", "--repeat", "2", "--warmup", "0", "--store",
                      "{disk}/store"], "{disk}/store"),
    "tag": (["tag", "tiny@1", "full", "--store", "{disk}/store"], "{disk}/store"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(DISK_CASES))
def test_a_full_disk_is_a_typed_error_naming_the_folder(packed_tiny, tmp_path, case):
    """Class: pack, pull, export, replay and tag on a full disk (its store's, its temp folder's, the zip's) end with
    exit 10 and one line naming the full folder and saying what was needed, never `unexpected OSError` (exit 70) or a
    worker that "ended abnormally"; nothing half-written is left visible (no new bundle, tag, run or zip; no temp
    file in the store). Where mount is not allowed, a file-size limit makes the same writes fail (EFBIG)."""
    argv, named = DISK_CASES[case]
    disk = tmp_path / "disk"
    with _small_disk(disk, 8 << 10) as mounted:
        if case.endswith("-store") or case == "tag" or case == "replay-store":
            shutil.copytree(packed_tiny.store, disk / "store")
        before = {p.relative_to(disk) for p in disk.rglob("*")}
        fill = {k: v.format(script=packed_tiny.script, store=packed_tiny.store, disk=disk) for k, v in
                {"a": " ".join(argv), "n": named}.items()}
        env = sub_env(tmp_path / "tmp")
        if case.endswith("-tmp"):
            env["TMPDIR"] = str(disk)
        if mounted:
            _fill(disk, 4096 if case.endswith("-tmp") else 0)
        done = subprocess.run([EXE, *fill["a"].split()], env=env, capture_output=True, text=True, timeout=900,
                              preexec_fn=None if mounted else _fsize_limit(64 << 10))
        after = {p.relative_to(disk) for p in disk.rglob("*")}
    err = done.stderr
    assert done.returncode == 10, (case, done.returncode, done.stdout, err)
    assert "Traceback" not in err and "unexpected" not in err and "ended abnormally" not in err, err
    assert "no space left in" in err and "was needed" in err, err
    if mounted:
        assert fill["n"] in err, (fill["n"], err)
    left = {str(p) for p in after - before if p.name != "filler"}
    assert not {p for p in left if "bundles/tiny2" in p or "tags/" in p or p.endswith(".zip")
                or ".part" in p or "/put-" in p or p.startswith("reprobundle-")}, left


# --------------------------------------------------------------------------------- secrets on a command line

ARGV_PROGRAM = """\
import sys
import jax, jax.numpy as jnp, numpy as np

f = jax.jit(lambda a: jnp.tanh(a) * 2)
x = np.ones((4, 4), np.float32)
for _ in range(3):
    f(x).block_until_ready()
print("args", len(sys.argv))
"""
ARGV_SECRETS = {"--api-key=": "sk-proj-a1b2c3d4e5f6g7h8i9j0k1l2", "--token": "ghp_abcdefghijklmnopqrstuvwxyz0123",
                "-p": "hunter2-is-my-password", "--db.password": "p4ssw0rd-value", "PASSWORD=": "s3cr3t-assignment",
                "": "https://alice:topsecret-in-url@example.com/data"}


@pytest.mark.slow
def test_no_secret_from_the_command_line_is_stored_printed_or_exported(tmp_path):
    """Class: `capture -- python prog.py` with secrets on the program's command line in several spellings (an option
    with `=`, an option and its value, `-p VALUE`, a dotted name, `NAME=VALUE`, credentials in a URL): none of them
    reaches the store, the capture's output (text and --json), or an exported zip; the program itself got them."""
    prog = tmp_path / "prog.py"
    prog.write_text(ARGV_PROGRAM)
    args = []
    for flag, value in ARGV_SECRETS.items():
        args += [flag + value] if flag.endswith("=") or not flag else [flag, value]
    store = tmp_path / "store"
    env = sub_env(tmp_path / "tmp")
    outputs = []
    for extra in ([], ["--json"]):
        done = subprocess.run([EXE, "capture", "--top", "1", "--name", f"argv{len(extra)}", "--repeat", "1",
                               "--warmup", "0", "--no-dump", "--store", str(store), *extra, "--", sys.executable,
                               str(prog), *args], env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        assert f"args {len(args) + 1}" in done.stdout  # the program ran with its arguments as given
        outputs.append(done.stdout + done.stderr)
        assert "<redacted>" in done.stdout or "<redacted>" in done.stderr, done.stdout
    code, out, err = cli("export", "argv0", "-o", tmp_path / "argv.zip", store=store)
    assert code == 0, err
    shown = cli("show", "argv0", store=store)[1]
    leaks = []
    for label, data in [*_all_bytes(store), *_all_bytes(tmp_path / "argv.zip"),
                        *(("output", o.encode()) for o in outputs), ("show", shown.encode())]:
        for value in ARGV_SECRETS.values():
            for needle in (value.encode(), value[-12:].encode()):
                if needle in data:
                    leaks.append(f"{value[:10]}... in {label}")
    assert not leaks, leaks
