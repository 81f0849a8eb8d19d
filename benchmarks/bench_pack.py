"""Packing large inputs, against numpy's own save of the same arrays to the same disk, in the same run.

Figures (medians over --rounds):
- input storage: the time pack spends hashing and writing the input blobs, against `np.save` of the same arrays
  (goal <= 1.15x); and the whole `pack` (export + storage + the reference run in a worker) for context;
- peak memory of the packing process against the input bytes (goal <= 1.3x), measured in a fresh process;
- re-pack of unchanged inputs: new blob bytes written (goal 0).

Usage: .venv/bin/python benchmarks/bench_pack.py [--gib 1.0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp
import reprobundle
from reprobundle.capture.export import as_bytes
from reprobundle.bundle.registry import Registry

n_bytes, store, mode = int(sys.argv[2]), sys.argv[3], sys.argv[4]
leaves = [np.random.default_rng(i).standard_normal(n_bytes // 4 // 4, dtype=np.float32) for i in range(4)]
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = {"input_bytes": sum(a.nbytes for a in leaves), "rss_before_pack": base_rss}
if mode == "npsave":
    t0 = time.perf_counter()
    for i, a in enumerate(leaves):
        with open(os.path.join(store, f"a{i}.npy"), "wb") as f:
            np.save(f, a)
            f.flush(); os.fsync(f.fileno())
    out["seconds"] = time.perf_counter() - t0
elif mode == "blobs":
    registry = Registry.open(store)
    t0 = time.perf_counter()
    for a in leaves:
        registry.put_blob(as_bytes(a))
    out["seconds"] = time.perf_counter() - t0
else:
    def f(a, b, c, d):
        return a[:8] + b[:8] + c[:8] + d[:8]
    t0 = time.perf_counter()
    reprobundle.pack(jax.jit(f), *leaves, name="big", store=store, warmup=0, repeat=1, dump=False, profile=False)
    out["seconds"] = time.perf_counter() - t0
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def child(n_bytes: int, store: str, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(n_bytes), store, mode], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    n_bytes = int(opts.gib * (1 << 30))
    storage_ratios, pack_ratios, mem_ratios, repack_new = [], [], [], []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        for r in range(opts.rounds):
            npdir = Path(tmp) / f"np{r}"
            npdir.mkdir()
            npsave = child(n_bytes, str(npdir), "npsave")
            blobs = child(n_bytes, str(Path(tmp) / f"blobs{r}"), "blobs")
            store = Path(tmp) / f"store{r}"
            packed = child(n_bytes, str(store), "pack")
            before = set((store / "blobs").rglob("*"))
            child(n_bytes, str(store), "pack")  # same inputs again
            new_files = set((store / "blobs").rglob("*")) - before
            new_total = sum(p.stat().st_size for p in new_files if p.is_file())
            repack_new.append(sum(p.stat().st_size for p in new_files if p.is_file() and p.stat().st_size > 1 << 20))
            print(f"  re-pack wrote {len(new_files)} new blobs, {new_total} bytes (the reference run's timings, "
                  f"profile and outputs); input-sized (> 1 MiB) new bytes: {repack_new[-1]}")
            storage_ratios.append(blobs["seconds"] / npsave["seconds"])
            pack_ratios.append(packed["seconds"] / npsave["seconds"])
            mem_ratios.append(packed["peak_rss"] / packed["input_bytes"])
            print(f"round {r}: np.save {npsave['seconds']:.2f} s, input blobs {blobs['seconds']:.2f} s, "
                  f"whole pack {packed['seconds']:.2f} s, peak RSS {packed['peak_rss'] / 2**30:.2f} GiB "
                  f"(before pack {packed['rss_before_pack'] / 2**30:.2f} GiB)", flush=True)
            for d in (npdir, Path(tmp) / f"blobs{r}", store):
                subprocess.run(["rm", "-rf", str(d)], check=True)
    print(f"inputs: {opts.gib} GiB in 4 float32 arrays; rounds={opts.rounds}")
    print(f"input storage / np.save: median {statistics.median(storage_ratios):.2f}x  goal <= 1.15x")
    print(f"whole pack / np.save: median {statistics.median(pack_ratios):.2f}x  (export + storage + reference run)")
    print(f"peak RSS / input bytes: median {statistics.median(mem_ratios):.2f}x  goal <= 1.3x")
    print(f"re-pack of unchanged inputs, new input blob bytes: max {max(repack_new)}  goal 0")


if __name__ == "__main__":
    main()
