"""Sharing bundles through a GCS registry (a real fake-gcs-server on localhost) and local folders: push / pull / copy,
the read-through blob cache, url snippets, gc, export size advice, and the errors on the way. No mocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

import jax
import numpy as np
import pytest
import quick
from audit import audited, logged
from cli_runner import cli
from small_bundle import copy_of

import reprobundle
from reprobundle.bundle import blobs, sharing
from reprobundle.bundle import cache as cache_mod
from reprobundle.bundle import manifest as mf
from reprobundle.bundle.cache import BlobCache
from reprobundle.bundle.registry import Registry, blob_key
from reprobundle.config import cache_dir
from reprobundle.store import open_store
from reprobundle.store.gcs import DEFAULT_RETRIES

EXE = Path(sys.executable).with_name("reprobundle")


@pytest.fixture(scope="module")
def proc_env():
    """Environment for the spawned CLI processes. Where bytecode writing is off (PYTHONDONTWRITEBYTECODE), each
    process would compile gcsfs & co. from source (seconds of CPU each): give them a shared bytecode cache instead."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "reprobundle-test-pycache")
        subprocess.run([sys.executable, "-c", "import reprobundle.cli, reprobundle.store.gcs, reprobundle.bundle.sharing"],
                       env=env, check=True, timeout=120)
    return env


@pytest.fixture(scope="module")
def packed(small_store_template, tmp_path_factory):
    """The small real bundle `small@1` (tests/small_bundle.py) in a local store of the module's own."""
    return copy_of(small_store_template, tmp_path_factory.mktemp("packed") / "store")


def _runs(out: str) -> list[dict]:
    data = json.loads(out)
    return data["runs"] if isinstance(data, dict) else data


def _bundle_id(store, ref="small@1"):
    return Registry.open(store).resolve(ref).ref.bundle_id


def test_push_twice_pull_replay(packed, gcs_store_url, tmp_path):
    code, out, err = cli("push", "small@1", "--to", gcs_store_url, store=packed)
    assert code == 0, err
    assert f"pushed small@1 to {gcs_store_url} as small@1 (version kept)" in out
    assert "push small@1:" in err and "(100%)" in err  # the progress line on stderr
    total_blobs = len(mf.blob_refs(Registry.open(packed).resolve("small@1").manifest))
    assert f"({total_blobs} blobs and the manifest)" in out

    code, out, err = cli("push", "small@1", "--to", gcs_store_url, "--json", store=packed)
    assert code == 0, err
    again = json.loads(out)
    print(f"\nsecond push: {again['bytes_sent']} bytes sent, {again['blobs_skipped']} blobs skipped "
          f"({again['bytes_skipped']} bytes)")
    assert again["bytes_sent"] == 0 and again["blobs_sent"] == 0
    assert again["blobs_skipped"] == total_blobs and again["outcome"] == "present"
    assert Registry.open(gcs_store_url).versions("small") == [1]

    local2 = tmp_path / "pulled"
    code, out, err = cli("pull", f"{gcs_store_url}/small@1", "--json", store=local2)
    assert code == 0, err
    pulled = json.loads(out)
    assert pulled["ref"] == "small@1" and pulled["blobs_sent"] == total_blobs
    assert _bundle_id(local2) == _bundle_id(packed)  # the manifest travelled byte for byte
    assert Registry.open(local2).verify(Registry.open(local2).resolve("small@1")) == []

    code, out, err = cli("replay", "small@1", *quick.REPLAY_ARGS, "--json", store=local2)
    assert code == 0, err
    assert _runs(out)[0]["status"] == "ok"


def test_gs_replay_reads_through_the_cache(packed, gcs_store_url, gcs_server, proc_env):
    assert reprobundle.api.push("small@1", gcs_store_url, store=str(packed)).outcome == "kept"
    url = f"{gcs_store_url}/small@1"
    before = blobs.STATS.snapshot()
    code, out, err = cli("replay", url, *quick.REPLAY_ARGS)
    assert code == 0, err
    first = blobs.STATS.snapshot()
    assert first.bytes_downloaded > before.bytes_downloaded
    assert "into the cache" in err
    cached = sorted((cache_dir() / "blobs" / "sha256").rglob("*"))
    assert any(p.is_file() for p in cached)

    code, out, err = cli("replay", url, *quick.REPLAY_ARGS, "--json")
    assert code == 0, err
    second = blobs.STATS.snapshot()
    assert second.bytes_downloaded == first.bytes_downloaded  # nothing fetched again
    assert second.cache_hits > first.cache_hits
    assert _runs(out)[0]["status"] == "ok"

    # a real process with the same cache downloads nothing either, and records its run in the gs:// store too
    env = {**proc_env, **{k: os.environ[k] for k in ("REPROBUNDLE_CACHE_DIR", "STORAGE_EMULATOR_HOST")},
           "REPROBUNDLE_STORE": "/nonexistent-default-store"}
    done = subprocess.run([str(EXE), "replay", url, *quick.REPLAY_ARGS], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert " ok " in done.stdout and "into the cache" not in done.stderr
    runs = Registry.open(gcs_store_url).runs(_bundle_id(packed))
    assert len(runs) == 3 and all(r["status"] == "ok" for r in runs)

    code, out, _ = cli("cache", "--json")
    usage = json.loads(out)
    assert code == 0 and usage["blobs"] > 0 and usage["bytes"] > 0
    code, out, _ = cli("cache", "--clear")
    assert code == 0 and "removed" in out
    assert json.loads(cli("cache", "--json")[1])["blobs"] == 0


def test_cache_evicts_least_recently_used(gcs_store_url, monkeypatch):
    registry = Registry.open(gcs_store_url)
    blobs = [registry.put_blob(bytes([i]) * 1000) for i in range(3)]
    assert registry.blob_cache is not None  # remote stores read through the cache
    monkeypatch.setenv(cache_mod.CACHE_MAX_ENV, "2500")
    cache = BlobCache.default()
    assert cache.max_bytes == 2500 and cache_mod.parse_size("20G") == 20 << 30
    for i, b in enumerate(blobs[:2]):
        path = BlobCache.default().fetch(registry.store, b["digest"])  # a fresh instance: nothing pinned
        os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
    BlobCache.default().fetch(registry.store, blobs[1]["digest"])  # use blob 1 again: blob 0 is now the oldest
    BlobCache.default().fetch(registry.store, blobs[2]["digest"])
    present = [cache.path_of(b["digest"]).is_file() for b in blobs]
    assert present == [False, True, True]
    assert cache.usage().bytes == 2000


def test_eight_concurrent_pushes_get_distinct_versions(packed, gcs_store_url, tmp_path, proc_env):
    source = Registry.open(packed)
    bundle = source.resolve("small@1")
    stores = []
    for i in range(8):  # eight different bundles all called small@1, each in its own local store
        reg = Registry.open(tmp_path / f"s{i}")
        for ref in mf.blob_refs(bundle.manifest):
            reg.put_blob(source.get_blob(ref))
        assert reg.publish({**bundle.manifest, "description": f"variant {i}"}).version == 1
        stores.append(tmp_path / f"s{i}")
    procs = [subprocess.Popen([str(EXE), "push", "small@1", "--to", gcs_store_url, "--json", "--store", str(s)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=proc_env)
             for s in stores]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    print("\npush seconds:", sorted(r["seconds"] for r in results))
    assert sorted(r["version"] for r in results) == list(range(1, 9))
    assert sorted(r["outcome"] for r in results) == ["kept"] + ["renumbered"] * 7
    dest = Registry.open(gcs_store_url)
    descriptions = {dest.load("small", v).manifest["description"] for v in range(1, 9)}
    assert descriptions == {f"variant {i}" for i in range(8)}
    assert all(dest.verify(b) == [] for b in dest.iter_bundles("small"))


def test_corrupt_blob_detected_on_pull_nothing_published(packed, gcs_store_url, tmp_path):
    assert reprobundle.api.push("small@1", gcs_store_url, store=str(packed)).blobs_sent > 0
    digest = Registry.open(packed).resolve("small@1").manifest["inputs"]["leaves"][0]["blob"]["digest"]
    gs = open_store(gcs_store_url)
    raw = bytearray(gs.get(blob_key(digest)))
    raw[3] ^= 0xFF
    gs.put(blob_key(digest), bytes(raw))  # damaged in the bucket

    dest = tmp_path / "dest"
    code, out, err = cli("pull", f"{gcs_store_url}/small@1", store=dest)
    assert code == 6, err
    assert f"\nerror: blob {digest} from {gcs_store_url} is corrupt" in err and "Traceback" not in err
    assert Registry.open(dest).names() == []  # no manifest: nothing visible
    assert not (dest / blob_key(digest)).exists()

    # reading it straight from gs:// (through the cache) is refused the same way
    code, out, err = cli("replay", f"{gcs_store_url}/small@1", *quick.REPLAY_ARGS)
    assert code == 6 and digest in err
    assert not BlobCache.default().path_of(digest).exists()


def test_copy_from_zip_and_between_stores(packed, gcs_store_url, tmp_path):
    zpath = tmp_path / "small.zip"
    code, _, err = cli("export", "small@1", "-o", zpath, store=packed)
    assert code == 0 and "warning" not in err  # small: no size warning
    code, out, err = cli("copy", zpath, gcs_store_url, "--json")
    assert code == 0, err
    assert json.loads(out)["outcome"] == "kept"
    code, out, err = cli("copy", f"{gcs_store_url}/small@1", tmp_path / "other", "--json")
    assert code == 0, err
    assert json.loads(out)["ref"] == "small@1"
    # a different bundle under a taken number gets the next free one, and says so
    reg = Registry.open(tmp_path / "other")
    m = reg.resolve("small@1").manifest
    reg.publish({**m, "description": "changed"})  # small@2 locally
    Registry.open(gcs_store_url).publish({**m, "description": "someone else's"})  # small@2 taken on gs
    code, out, err = cli("push", "small@2", "--to", gcs_store_url, store=tmp_path / "other")
    assert code == 0, err
    assert "as small@3 (version 2 is taken there)" in out
    code, out, err = cli("copy", "small@1", tmp_path / "x.zip", store=packed)
    assert code == 2 and "reprobundle export" in err


def test_url_snippet(packed, gcs_store_url, gcs_server, monkeypatch):
    reprobundle.api.push("small@1", gcs_store_url, store=str(packed))
    code, out, err = cli("url", f"{gcs_store_url}/small@1", "--json")
    assert code == 0, err
    info = json.loads(out)
    env = Registry.open(packed).resolve("small@1").manifest["environment"]
    assert info["url"] == f"{gcs_store_url}/small@1"
    with urllib.request.urlopen(info["https_url"], timeout=10) as r:  # the manifest object, over HTTP
        assert mf.bundle_id(r.read()) == _bundle_id(packed)
    command = f"reprobundle replay {gcs_store_url}/small@1 --jax {jax.__version__}"
    assert info["replay_command"] == command
    md = info["markdown"]
    for text in (command, "`_small`", "tanh of a matmul", "`float32[8, 16]`", "`float32[16, 4]`",
                 f"jax {env['jax']}", f"jaxlib {env['jaxlib']}", f"Python {env['python']}", "Reference time"):
        assert text in md, text
    code, out, err = cli("url", f"{gcs_store_url}/small@1", "--jax", "0.4.30", "--jax", "0.6.0")
    assert code == 0 and f"reprobundle replay {gcs_store_url}/small@1 --jax 0.4.30 --jax 0.6.0" in out
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")  # on real GCS: the public endpoint and the console page
    urls = sharing._object_urls(Registry.open("gs://team-bucket/repro"), "bundles/small/1.msgpack")
    assert urls == {"https_url": "https://storage.googleapis.com/team-bucket/repro/bundles/small/1.msgpack",
                    "console_url": "https://console.cloud.google.com/storage/browser/_details/team-bucket/repro/"
                                   "bundles/small/1.msgpack"}
    assert f"([https](https://storage.googleapis.com/{gcs_store_url[5:]}/small@1))" in md  # its public form
    code, out, err = cli("url", "small@1", store=packed)  # a local store: the snippet itself says how to share it
    assert code == 0 and err == "" and "file://" in out  # the url line; never in the snippet
    snippet = out.split("Paste into the issue:")[1]
    assert "Not shareable yet" in snippet and "push" in snippet and "file://" not in snippet


def test_gc_dry_run_then_delete(packed, gcs_store_url, tmp_path):
    for target in (tmp_path / "local", gcs_store_url):
        reprobundle.api.copy("small@1", str(target), store=str(packed))
        registry = Registry.open(target)
        orphan = registry.put_blob(b"nobody refers to me" * 100)
        registry.close()  # no longer a running writer: its lease goes
        # The default grace period (24 h) keeps a blob written a moment ago (a pack or push may still be running).
        code, out, err = cli("gc", "--delete", store=target)
        assert code == 0 and "removed 0 unreferenced blobs" in out and registry.store.exists(blob_key(orphan["digest"])), out
        assert "kept 1 blobs used within the grace period (1 d)" in out, out
        code, out, err = cli("gc", "--json", "--grace", "0", store=target)
        assert code == 0, err
        data = json.loads(out)
        assert data["dry_run"] and [b["digest"] for b in data["blobs"]] == [orphan["digest"]]
        assert data["bytes"] == orphan["size"] == 1900
        assert registry.store.exists(blob_key(orphan["digest"]))
        code, out, err = cli("gc", "--delete", "--grace", "0", store=target)
        assert code == 0 and "removed 1 unreferenced blobs (1.9 KiB)" in out
        assert not registry.store.exists(blob_key(orphan["digest"]))
        assert registry.verify(registry.resolve("small@1")) == []
        assert "would remove 0" in cli("gc", "--grace", "0", store=target)[1]


def test_export_warns_over_25_mb(tmp_path):
    big = np.arange(7_000_000, dtype=np.float32)  # 28 MB of real input data
    store = tmp_path / "store"
    reprobundle.pack(jax.jit(lambda x: (x * 2).sum()), big, name="big", store=str(store), warmup=1, repeat=3,
                     profile=False, dump=False)
    zpath = tmp_path / "big.zip"
    code, out, err = cli("export", "big", "-o", zpath, store=store)
    assert code == 0, err
    assert zpath.stat().st_size > 25_000_000 and zipfile.is_zipfile(zpath)
    assert err.startswith("warning: the zip is") and "25 MB" in err and "--synthetic-inputs" in err
    assert "26.7 MiB" in err  # the stored inputs


@pytest.mark.parametrize("case", ["no_bucket", "unreachable", "missing_bundle"])
def test_errors_are_one_line_and_fast(packed, gcs_server, gcs_store_url, monkeypatch, case):
    target = gcs_store_url
    argv = ["push", "small@1", "--to"]
    if case == "no_bucket":
        target, want, code_want = "gs://no-such-bucket-here/x", "does not exist", 3
    elif case == "unreachable":
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
        want, code_want = "cannot reach", 3
    else:
        argv, target, want, code_want = ["pull"], f"{gcs_store_url}/ghost@1", "no bundle ghost@1", 4
    with audited() as did, logged("reprobundle.store.gcs_http") as records:
        code, out, err = cli(*argv, target, store=packed)
    assert code == code_want, err
    assert err.startswith("error: ") and want in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # the error and its hint
    # fast by what it did, not by a clock: an answer (404) is not retried; a refused connection is retried at most
    # REPROBUNDLE_GCS_RETRIES times (default 3), each retry one new connection attempt
    retries = [r for r in records if "retry %d of %d" in str(r.msg)]
    if case == "unreachable":
        assert len(retries) <= DEFAULT_RETRIES and len(did.connects(port)) == len(retries) + 1
    else:
        assert retries == []


def test_digest_of_pushed_manifest_unchanged(packed, gcs_store_url):
    result = reprobundle.api.push("small@1", gcs_store_url, store=str(packed))
    data = open_store(gcs_store_url).get("bundles/small/1.msgpack")
    assert mf.bundle_id(data) == result.ref.bundle_id == _bundle_id(packed)
