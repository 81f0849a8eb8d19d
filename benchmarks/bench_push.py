"""Push and pull of a large bundle to a GCS server, against raw gcsfs put and get of one file of the same size, in
the same run; and the bytes a second push sends.

A real fake-gcs-server on loopback (tests/gcs_server.py), so the ratio compares client work, not a network.
Ratio = raw gcsfs time / reprobundle time (goal >= 0.8x). Usage: .venv/bin/python benchmarks/bench_push.py [--gib 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from bench_gcs import load_server_module  # noqa: E402  (this folder is first on sys.path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    opts = parser.parse_args()
    server = load_server_module().start_gcs_server()
    os.environ.update(server.env())
    try:
        import gcsfs
        import jax

        from reprobundle import api

        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
            n = int(opts.gib * (1 << 30)) // 4 // 4
            leaves = [np.random.default_rng(i).standard_normal(n, dtype=np.float32) for i in range(4)]
            local = os.path.join(tmp, "local")
            api.pack(jax.jit(lambda a, b, c, d: a[:4] + b[:4] + c[:4] + d[:4]), *leaves, name="big", store=local,
                     warmup=0, repeat=1, dump=False, profile=False)
            raw_file = Path(tmp) / "raw.bin"
            with open(raw_file, "wb") as f:
                for a in leaves:
                    f.write(a.tobytes())
            del leaves
            size = raw_file.stat().st_size
            fs = gcsfs.GCSFileSystem(endpoint_url=server.endpoint, token="anon")
            bucket = server.bucket

            t0 = time.perf_counter()
            fs.put(str(raw_file), f"{bucket}/raw/raw.bin")
            raw_put = time.perf_counter() - t0
            t0 = time.perf_counter()
            fs.get(f"{bucket}/raw/raw.bin", str(Path(tmp) / "raw.back"))
            raw_get = time.perf_counter() - t0

            url = server.url("bench")
            first = api.push("big@1", url, store=local)
            second = api.push("big@1", url, store=local)
            t0 = time.perf_counter()
            pulled = api.pull(f"{url}/big@1", store=os.path.join(tmp, "pulled"))
            pull_s = time.perf_counter() - t0
    finally:
        server.stop()
    gib = size / 2**30
    print(f"bundle inputs {gib:.2f} GiB ({first.blobs_total} blobs); raw gcsfs put {raw_put:.1f} s, get {raw_get:.1f} s")
    print(f"push: {first.seconds:.1f} s ({raw_put / first.seconds:.2f}x raw put)  goal >= 0.8x")
    print(f"pull: {pull_s:.1f} s ({raw_get / pull_s:.2f}x raw get)  goal >= 0.8x; {pulled.blobs_sent} blobs")
    print(f"second push of the same bundle: {second.bytes_sent} bytes sent, {second.blobs_skipped} blobs skipped  goal 0")


if __name__ == "__main__":
    main()
