"""Write the reports (Markdown, HTML, terminal text) of a comparison built from the recorded attention fixtures
(tests/data/hlo: real optimized HLO, per-op profiles and timings of JAX 0.7.2, 0.8.0, 0.10.2 and 0.4.30), timed
together in 3 rounds, with a failed version and a Reproduce block: what scripts/screenshot_report.sh renders.

    .venv/bin/python scripts/fixture_report.py OUT_FOLDER
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprobundle.analysis.comparison import build_comparison  # noqa: E402
from reprobundle.render import comparison as R  # noqa: E402

DATA = ROOT / "tests" / "data" / "hlo"


def fixture_comparison() -> dict:
    env = {"python": "3.11.7", "platform": "cpu", "cpu_model": "AMD EPYC 7B13"}
    texts, runs = {}, []
    for v in ("0.7.2", "0.8.0", "0.10.2", "0.4.30"):
        data = json.loads((DATA / f"attention-{v}.per_op.json").read_text())
        texts[v] = (DATA / f"attention-{v}.hlo").read_text()
        samples = data["samples_ns"]
        third = len(samples) // 3
        runs.append({"run_id": f"20261130T120000-{v.replace('.', '')}0000"[:24], "bundle": "attention@3",
                     "bundle_id": "sha256:" + "ab" * 32, "requested": v, "status": "ok", "reason": "",
                     "route": "deserialize", "created": "2026-11-30T12:00:00.000000Z",
                     "environment": {"jax": v, "jaxlib": v, **env}, "per_op": data["per_op"], "artifacts": {},
                     "notes": ["rebuild: calling_convention_version 10 is above this jax's supported range [9..9]; "
                               "used 9"] if v == "0.4.30" else [],
                     "check": {"ok": True, "bit_identical": v == "0.7.2", "max_abs_err": 0.0 if v == "0.7.2" else 3e-7,
                               "max_rel_err": 0.0, "leaves": []},
                     "timing": {"warmup": 5, "samples_ns": samples, "compile_s": 0.25, "steps": [1] * len(samples),
                                "rounds": [third, third, len(samples) - 2 * third], "group": "20261130T120000-g"}})
    runs.append({"run_id": "20261130T120000-0420", "bundle": "attention@3", "bundle_id": "sha256:" + "ab" * 32,
                 "requested": "0.4.20", "status": "incompatible", "created": "2026-11-30T12:00:00.000000Z",
                 "reason": "no route could load the function: deserialize: unsupported serialization version 12",
                 "route": None, "environment": {"jax": "0.4.20", **env}, "per_op": [], "artifacts": {},
                 "check": None})
    ref = json.loads((DATA / "attention-0.7.2.per_op.json").read_text())
    manifest = {"name": "attention", "version": 3, "description": "multi-head attention, f32",
                "created": "2026-11-30T11:00:00.000000Z",
                "function": {"kind": "jax.export", "fields": {"fun_name": "attention"}},
                "environment": {"jax": "0.7.2", "jaxlib": "0.7.2", **env},
                "reference": {"outputs": [], "route": "deserialize", "per_op": ref["per_op"],
                              "timing": {"warmup": 5, "samples_ns": ref["samples_ns"], "compile_s": 0.3}}}
    c = build_comparison(manifest, runs, "0.7.2", hlo_texts=texts, outputs={})
    c["reproduce"] = {"bundle": "attention@3", "kind": "zip", "url": "attention-3.zip", "attach": "attention-3.zip",
                      "versions": ["0.7.2", "0.8.0", "0.10.2", "0.4.30", "0.4.20"], "install": None,
                      "shareable": False, "export_command": None, "https_url": None, "warning": None,
                      "command": "reprobundle replay attention-3.zip --jax 0.7.2 --jax 0.8.0 --jax 0.10.2 "
                                 "--jax 0.4.30 --jax 0.4.20",
                      "standalone": ["python3 -m venv jax-0.8.0 && jax-0.8.0/bin/pip install -q jax==0.8.0 msgpack "
                                     "flatbuffers", "jax-0.8.0/bin/python attention-3.zip"]}
    return c


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reprobundle-report-fixture")
    out.mkdir(parents=True, exist_ok=True)
    c = fixture_comparison()
    (out / "report.md").write_text(R.to_markdown(c))
    (out / "report.html").write_text(R.to_html(c))
    (out / "report.txt").write_text(R.to_text(c) + "\n")
    print(out / "report.html")
