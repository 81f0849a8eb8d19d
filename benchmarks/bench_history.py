"""`history` of a large registry: N bundles x R releases, from a local store, against reading its run records.

    .venv/bin/python benchmarks/bench_history.py                      # 300 bundles x 8 releases
    .venv/bin/python benchmarks/bench_history.py --bundles 50 --releases 4 --passes 3

The registry is made once per run: one real bundle packed and replayed on the installed JAX (3 rounds), then N
bundles published under other names (same blobs, other manifests) whose runs are that replay's run record copied
and relabelled as R releases timed together in one group (R run records per bundle: N x R in all). Relabelled runs
are data for this measurement only; what is measured is reading and judging them, which does not depend on their
values. Figures, each the median of the passes:
- baseline: read every bundle's run records (Registry.runs for each, what any history must at least do);
- history: api.history (selection, reading, a paired verdict per cell) and its ratio to the baseline;
- page: render/history.to_text and to_html of that data, and their ratio to the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

from chain import chain  # noqa: E402

import reprobundle  # noqa: E402
from reprobundle import api  # noqa: E402
from reprobundle.bundle.registry import Registry  # noqa: E402
from reprobundle.render import history as history_render  # noqa: E402

RELEASES = ["0.4.30", "0.4.38", "0.5.3", "0.6.2", "0.7.2", "0.8.0", "0.9.2", "0.10.2"]


def build_registry(store: str, bundles: int, releases: list[str]) -> None:
    fn, args = chain(2, rows=32, width=64)
    reprobundle.pack(fn, *args, name="seed", store=store, warmup=1, repeat=2, dump=False, profile=False)
    registry = Registry.open(store)
    seed = registry.resolve("seed")
    run = reprobundle.replay("seed", ["installed"], store=store, rounds=3, repeat=4, warmup=1).run
    for i in range(bundles):
        manifest = {**seed.manifest, "name": f"b{i:04d}", "version": 1}
        ref = registry.publish(manifest)
        group = Registry.new_run_id()
        for k, release in enumerate(releases):
            registry.put_run({**run, "run_id": f"{group}-{k}", "bundle_id": ref.bundle_id, "bundle": str(ref),
                              "requested": release, "group": group,
                              "contender": {**run["contender"], "jax": release, "label": release},
                              "timing": {**run["timing"], "group": group}})


def timed(fn) -> tuple[float, dict]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, default=300)
    parser.add_argument("--releases", type=int, default=8)
    parser.add_argument("--passes", type=int, default=3)
    opts = parser.parse_args()
    releases = RELEASES[: opts.releases]
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        made, _ = timed(lambda: build_registry(store, opts.bundles, releases))
        print(f"registry: {opts.bundles} bundles x {len(releases)} releases made in {made:.1f} s")
        registry = Registry.open(store)
        ids = [b.ref.bundle_id for b in registry.iter_bundles() if b.ref.name != "seed"]
        reads, histories, pages = [], [], []
        for _ in range(opts.passes):
            reads.append(timed(lambda: sum(len(registry.runs(i)) for i in ids))[0])
            elapsed, data = timed(lambda: api.history(["b*"], store=store, baseline=releases[0]))
            histories.append(elapsed)
            pages.append(timed(lambda d=data: (history_render.to_text(d), history_render.to_html(d)))[0])
        read, history, page = (statistics.median(x) for x in (reads, histories, pages))
        cells = sum(len(r["cells"]) for r in data["rows"])
        print(f"read every run record (baseline): {read:.2f} s")
        print(f"history: {history:.2f} s, {history / read:.2f}x the reads ({cells} cells)")
        print(f"text + HTML: {page:.2f} s, {page / read:.2f}x the reads")


if __name__ == "__main__":
    main()
