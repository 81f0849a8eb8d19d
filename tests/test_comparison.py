"""reprobundle.analysis.comparison: the multi-version report, built from real HLO, real per-op profiles and real timings
(tests/data/hlo, see its README), and from HLO compiled by the installed JAX at test time."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from reprobundle.analysis import comparison as C
from reprobundle.analysis import hlo_diff
from reprobundle.analysis.verdict import timing_verdict
from reprobundle.render import comparison as R

DATA = Path(__file__).parent / "data" / "hlo"
VERSIONS = ("0.7.2", "0.8.0", "0.10.2", "0.4.30")


def fixture(version: str) -> tuple[str, dict]:
    return ((DATA / f"attention-{version}.hlo").read_text(),
            json.loads((DATA / f"attention-{version}.per_op.json").read_text()))


def env(version: str) -> dict:
    return {"jax": version, "jaxlib": version, "python": "3.11.7", "platform": "cpu", "cpu_model": "AMD EPYC 7B13"}


def make_run(version: str, samples: list[int], per_op: list[dict], *, status: str = "ok", reason: str = "",
             err: float = 0.0, group: str | None = "replay-1") -> dict:
    run = {"run_id": f"run-{version}", "bundle": "attention@3", "bundle_id": "sha256:" + "ab" * 32,
           "requested": version, "status": status, "reason": reason, "route": "deserialize",
           "environment": env(version), "per_op": per_op, "artifacts": {},
           "check": {"ok": err < 1e-4, "bit_identical": err == 0.0, "max_abs_err": err, "max_rel_err": err, "leaves": []}}
    if status in ("ok", "mismatch"):
        run["timing"] = {"warmup": 5, "samples_ns": samples, "compile_s": 0.25}
        if group:  # timed together: one call per step, three rounds
            third = len(samples) // 3
            run["timing"].update(steps=[1] * len(samples), rounds=[third, third, len(samples) - 2 * third],
                                 group=group)
    else:
        run["check"] = None
    if group:
        run["group"] = group
    return run


@pytest.fixture
def case():
    return make_case()


def make_case():
    """Manifest, runs, HLO texts and outputs for attention@3 packed with 0.7.2 and replayed on four versions."""
    texts, runs, outputs = {}, [], {}
    rng = np.random.default_rng(0)
    out = rng.standard_normal((4, 16)).astype(np.float32)
    for k, v in enumerate(VERSIONS):
        text, data = fixture(v)
        texts[v] = text
        runs.append(make_run(v, data["samples_ns"], data["per_op"], err=0.0 if v == "0.7.2" else 3e-7))
        outputs[v] = [out if v in ("0.7.2", "0.8.0") else out + np.float32(1e-6 * (k + 1))]
    runs.append(make_run("0.4.20", [], [], status="incompatible",
                         reason="no route could load the function | deserialize: Traceback <most recent>\n  line 2"))
    _, ref = fixture("0.7.2")
    manifest = {"name": "attention", "version": 3, "description": "attention layer",
                "function": {"kind": "jax.export", "fields": {"fun_name": "attention"}},
                "environment": env("0.7.2"),
                "reference": {"outputs": [], "route": "deserialize", "per_op": ref["per_op"],
                              "timing": {"warmup": 5, "samples_ns": ref["samples_ns"], "compile_s": 0.3}}}
    return manifest, runs, texts, outputs


def build(case, baseline=None, **kw):
    manifest, runs, texts, outputs = case
    return C.build_comparison(manifest, runs, baseline, hlo_texts=texts, outputs=outputs, **kw)


# ------------------------------------------------------------------------------------------------ data


def test_rows_and_default_baseline(case):
    c = build(case)
    json.dumps(c)  # plain data
    assert c["baseline"] == "0.7.2" and c["bundle"] == "attention@3" and c["function"] == "attention"
    labels = [r["label"] for r in c["rows"]]
    assert labels == ["reference", "0.7.2", "0.8.0", "0.10.2", "0.4.30", "0.4.20"]
    rows = {r["label"]: r for r in c["rows"]}
    assert rows["0.7.2"]["is_baseline"] and rows["0.7.2"]["ratio"] == 1.0 and rows["0.7.2"]["verdict"] == "baseline"
    _, runs, _, _ = case
    for r in runs[1:4]:
        row = rows[r["requested"]]
        expect = timing_verdict(runs[0]["timing"], r["timing"])
        assert expect["method"] == "paired rounds" and row["together"]
        assert row["verdict"] == expect["verdict"] and row["ratio"] == pytest.approx(expect["ratio"])
        assert row["ci95"] == pytest.approx(expect["ci95"]) and row["p_value"] == pytest.approx(expect["p_value"])
        assert row["median_ns"] == pytest.approx(float(np.median(r["timing"]["samples_ns"])))
        assert row["compile_s"] == 0.25
    assert rows["0.8.0"]["err_base"]["bit_identical"] and not rows["0.10.2"]["err_base"]["bit_identical"]
    assert rows["0.10.2"]["err_base"]["max_abs_err"] == pytest.approx(3e-6, rel=0.1)
    assert rows["0.10.2"]["err_ref"]["max_abs_err"] == 3e-7
    assert rows["0.7.2"]["fusions"] == 7 and rows["0.8.0"]["fusions"] == 11
    assert rows["0.4.20"]["status"] == "incompatible" and rows["0.4.20"]["median_ns"] is None
    assert any("0.4.20: incompatible" in n for n in c["notes"])
    assert [d["label"] for d in c["diffs"]] == ["0.8.0", "0.10.2", "0.4.30"]


def test_each_diff_names_where_the_time_moved(case):
    c = build(case)
    for d in c["diffs"]:
        if d["per_op"] and d["moved_row"] is not None:
            top = d["moved_row"]
            assert (top["cand_name"] or top["base_name"].split(" + ")[0]) in d["moved"]
            if d["moved_how"] == "biggest":  # nothing to explain (a verdict of same): the biggest move
                assert top is d["per_op"][0]
    d080 = next(d for d in c["diffs"] if d["label"] == "0.8.0")
    assert d080["fusion"]["summary"].startswith("fusions 7 -> 11; wrapped into fusions")
    d0430 = next(d for d in c["diffs"] if d["label"] == "0.4.30")
    assert d0430["per_op"] == [] and "no per-op profile for 0.4.30" in d0430["moved"]


def test_acceptance_report_names_the_fusion_where_the_time_moved(case):
    """The candidate's subtract_exponential_fusion got 30x slower, and so did its wall time: every rendering says so."""
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    slow = runs[1]  # 0.8.0
    extra = 0.0
    for row in slow["per_op"]:
        if row["name"] == "subtract_exponential_fusion":
            extra = row["time_ns"] * 29
            row["time_ns"] *= 30
    slow["timing"]["samples_ns"] = [int(s + extra) for s in runs[0]["timing"]["samples_ns"]]
    for run in runs[:2]:  # six rounds: three cannot pass the first bound of the 32-look design (t > 32)
        n = len(run["timing"]["samples_ns"])
        run["timing"]["rounds"] = [n // 6] * 5 + [n - 5 * (n // 6)]
    c = C.build_comparison(manifest, runs, "0.7.2", hlo_texts=texts, outputs=outputs)
    d = next(d for d in c["diffs"] if d["label"] == "0.8.0")
    assert d["moved_row"]["cand_name"] == "subtract_exponential_fusion"
    assert d["moved_row"]["signature"] == "broadcast×2+multiply+subtract+exponential"
    assert "most moved: subtract_exponential_fusion" in d["moved"] and "slower" in d["moved"]
    text, md, page = R.to_text(c), R.to_markdown(c), R.to_html(c)
    assert re.search(r"jax 0\.8\.0 vs 0\.7\.2: median \+.*most moved: subtract_exponential_fusion", text)
    assert re.search(r"\*\*Where the time moved:\*\* median \+.*most moved: subtract\\_exponential\\_fusion", md)
    assert "<b>Where the time moved:</b> median +" in page and "most moved: subtract_exponential_fusion" in page


def test_explicit_baselines(case):
    c = build(case, "0.8.0")
    assert c["baseline"] == "0.8.0"
    assert [d["label"] for d in c["diffs"]] == ["0.7.2", "0.10.2", "0.4.30"]
    d = next(d for d in c["diffs"] if d["label"] == "0.7.2")
    assert {e["how"] for e in d["fusion"]["refused"]} == {"unwrapped"}
    ref = build(case, "reference")
    assert ref["baseline"] == "reference" and len(ref["diffs"]) == 4
    rows = {r["label"]: r for r in ref["rows"]}
    assert rows["0.10.2"]["err_base"] == rows["0.10.2"]["err_ref"]
    assert next(d for d in ref["diffs"] if d["label"] == "0.7.2")["fusion"] is None  # no HLO text for the reference
    with pytest.raises(ValueError, match="0.9.9"):
        build(case, "0.9.9")


def test_nothing_ran(case):
    manifest, runs, _, _ = case
    failed = [make_run(v, [], [], status=s, reason="boom") for v, s in (("0.8.0", "crashed"), ("0.9.0", "timeout"))]
    c = C.build_comparison(manifest, failed, None, hlo_texts={}, outputs={})
    assert c["baseline"] is None and c["diffs"] == []
    assert "no run succeeded" in c["notes"][0]
    for render in (R.to_text, R.to_markdown, R.to_html):
        assert "crashed" in render(c)


def test_missing_hlo_and_outputs(case):
    manifest, runs, _, _ = case
    c = C.build_comparison(manifest, runs, None, hlo_texts={}, outputs={})
    for d in c["diffs"]:
        assert d["fusion"] is None
    assert all(r["err_base"] is None for r in c["rows"])
    assert "no fusion diff" in R.to_markdown(c)


def test_duplicate_versions_get_distinct_labels(case):
    manifest, runs, texts, outputs = case
    c = C.build_comparison(manifest, runs + [copy.deepcopy(runs[1])], None, hlo_texts=texts, outputs=outputs)
    assert [r["label"] for r in c["rows"]][-1] == "0.8.0 #2"
    assert next(d for d in c["diffs"] if d["label"] == "0.8.0 #2")["fusion"]["summary"].startswith("fusions 7 -> 11")


# ------------------------------------------------------------------------------------------------ renderers


def test_text(case):
    out = R.to_text(build(case))
    lines = out.splitlines()
    assert lines[0].startswith("jax 0.8.0 is ") and "than jax 0.7.2" in lines[0] or "from jax 0.7.2" in lines[0]
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert "attention@3 (attention): 5 runs, baseline jax 0.7.2, on Python 3.11.7, cpu, AMD EPYC 7B13" in out
    assert "VERSION" in out and "0.7.2 *" in out and "incompatible" in out
    assert "wrapped: reduce_max.7 (unfused) -> wrapped_reduce (kLoop): reduce f32[4,8,512]" in out
    assert "top per-op moves" in out
    assert "Not timed together with the baseline (not comparable, no verdict):" in out
    apart = out.split("Not timed together")[1].split("\n\n")[0]
    assert "reference" in apart and "p=" not in apart and "slower" not in apart and "faster" not in apart


def test_headlines_one_per_candidate_in_every_rendering(case):
    c = build(case)
    assert [h["label"] for h in c["headlines"]] == ["0.8.0", "0.10.2", "0.4.30", "0.4.20"]
    for h in c["headlines"][:3]:
        # one interval: the 95% CI, or for an unsettled verdict the equivalence interval it was judged on
        assert re.search(r"(95% CI [0-9.]+-[0-9.]+x; |a change between [0-9.]+x and [0-9.]+x is not ruled out \()"
                         r"paired, 3 rounds timed together; p=", h["text"]), h["text"]
    assert c["headlines"][3]["direction"] == "failed" and "did not run (incompatible)" in c["headlines"][3]["text"]
    text, md, page = R.to_text(c), R.to_markdown(c), R.to_html(c)
    assert text.startswith(c["headlines"][0]["text"][:60])
    assert md.splitlines()[2].startswith("- ") and c["headlines"][0]["text"][:40] in md.splitlines()[2]
    assert page.index("class='headline") < page.index("<table")


def test_an_unsettled_headline_shows_the_one_interval_its_verdict_uses():
    """Undecided after its rounds: the line shows the equivalence interval the verdict was judged on (a change
    inside it is not ruled out), not also a 95% CI that could disagree with it; a settled one shows its 95% CI."""
    base = {"label": "0.7.2", "requested": "0.7.2", "jax": "0.7.2", "status": "ok", "median_ns": 1000,
            "ratio": 1.0, "together": True}
    row = {**base, "label": "0.8.0", "requested": "0.8.0", "jax": "0.8.0", "median_ns": 1180, "ratio": 1.18,
           "verdict": "same", "ci95": (1.031, 1.351), "p_value": 0.03, "rounds": 32, "decided_at": None,
           "settled": False, "equivalence": (0.99, 1.40)}
    text = C.headlines([base, row], base)[0]["text"]
    assert text == ("jax 0.8.0 is not measurably different from jax 0.7.2: 1.180x the time; not settled: a change "
                    "between 0.99x and 1.40x is not ruled out (paired, 32 rounds timed together; p=0.03)")
    assert "95% CI" not in text
    settled = C.headlines([base, {**row, "ratio": 1.01, "p_value": 0.5, "ci95": (0.97, 1.04), "settled": True,
                                  "equivalence": (0.97, 1.04)}], base)[0]["text"]
    assert settled.endswith(": 1.010x the time (95% CI 0.970-1.040x; paired, 32 rounds timed together; p=0.5)")
    assert "not settled" not in settled


def test_headline_of_a_clear_slowdown_says_direction_ratio_interval_and_p(case):
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    base = runs[0]["timing"]["samples_ns"]
    runs[1]["timing"]["samples_ns"] = [int(x * 1.3 * (1 + 0.01 * (i % 3))) for i, x in enumerate(base)]
    c = C.build_comparison(manifest, runs, "0.7.2", hlo_texts=texts, outputs=outputs)
    h = c["headlines"][0]
    assert h["direction"] == "slower" and h["comparable"]
    assert re.fullmatch(r"jax 0\.8\.0 is 1\.3\dx slower than jax 0\.7\.2 \(95% CI 1\.\d\d-1\.\d\dx; paired, "
                        r"3 rounds timed together[^;]*; p=\S+\)", h["text"]), h["text"]
    faster = copy.deepcopy(runs)
    faster[1]["timing"]["samples_ns"] = [int(x * 0.7 * (1 + 0.01 * (i % 3))) for i, x in enumerate(base)]
    h = C.build_comparison(manifest, faster, "0.7.2", hlo_texts=texts, outputs=outputs)["headlines"][0]
    assert h["direction"] == "faster" and re.match(r"jax 0\.8\.0 is 1\.4\dx faster than jax 0\.7\.2", h["text"])


def test_runs_not_timed_together_are_apart_without_verdict_or_p(case):
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    runs[1]["timing"]["group"] = runs[1]["group"] = "another-replay"
    c = C.build_comparison(manifest, runs, "0.7.2", hlo_texts=texts, outputs=outputs)
    rows = {r["label"]: r for r in c["rows"]}
    for label in ("reference", "0.8.0"):
        row = rows[label]
        assert not row["together"] and row["verdict"] is None and row["p_value"] is None and row["ci95"] is None
        assert row["apart_reason"] and row["ratio"] == pytest.approx(row["median_ns"] / rows["0.7.2"]["median_ns"])
    h = c["headlines"][0]
    assert h["direction"] == "apart" and not h["comparable"] and "not comparable" in h["text"] and "p=" not in h["text"]
    md, page = R.to_markdown(c), R.to_html(c)
    narrow = md.split("\n\n")[3]  # headlines, context, the one narrow table
    assert narrow.startswith("| version |") and "| 0.8.0 |" not in narrow and "reference" not in narrow
    assert "Not timed together with the baseline (not comparable, no verdict)" in md
    table = page.split("<table class='narrow'>")[1].split("</table>")[0]
    assert "0.8.0" not in table  # shown apart, outside the verdict table, in grey
    assert "class='apart'" in page


def test_the_moved_line_agrees_in_sign_with_the_whole_change(case):
    """0.8.0 made 30% slower overall while its biggest per-op move is a speed-up: the line names the biggest move
    that slowed down, never one that points the other way; when the profile moved the other way as a whole, it says
    the profile does not explain the change."""
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    base = runs[0]["timing"]["samples_ns"]
    runs[1]["timing"]["samples_ns"] = [int(x * 1.3 * (1 + 0.01 * (i % 3))) for i, x in enumerate(base)]
    c = C.build_comparison(manifest, runs, "0.7.2", hlo_texts=texts, outputs=outputs)
    d = c["diffs"][0]
    assert d["moved_how"] == "explains" and d["moved_row"]["delta_ns"] > 0
    assert d["moved_row"] is next(r for r in d["per_op"] if r["delta_ns"] > 0)
    assert "most moved: " + d["moved_row"]["cand_name"] in d["moved"]
    scale = 0.95 * sum(r["time_ns"] for r in runs[0]["per_op"]) / sum(r["time_ns"] for r in runs[1]["per_op"])
    for r in runs[1]["per_op"]:  # the profile now moved the other way in all (still covering the step)
        r["time_ns"] *= scale
    d = C.build_comparison(manifest, runs, "0.7.2", hlo_texts=texts, outputs=outputs)["diffs"][0]
    assert d["moved_row"] is None and d["moved_how"] == "unexplained"
    assert "the per-op profile does not explain it" in d["moved"] and "most moved" not in d["moved"]


def test_runs_used_say_which_runs_and_budget(case):
    c = build(case)
    used = {u["label"]: u for u in c["runs_used"]}
    assert used["0.8.0"]["run_id"] == "run-0.8.0" and used["0.8.0"]["together"]
    assert used["0.8.0"]["budget"].endswith("in 3 rounds (30 calls)")
    assert used["reference"]["budget"] == "30 calls in one process" and not used["reference"]["together"]


def test_worker_notes_are_shown(case):
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    # the rebuild route adjusted the calling convention and then failed; rebuild-compat adjusted it the same and
    # loaded the module: the note is said once, of the route that loaded it
    note = "calling_convention_version 10 is above this jax's supported range [9..9]; used 9"
    runs[3].update(route="rebuild-compat", notes=[f"rebuild: {note}", f"rebuild-compat: {note}"])
    c = C.build_comparison(manifest, runs, None, hlo_texts=texts, outputs=outputs)
    assert [n for n in c["notes"] if "calling_convention" in n] == [f"jax 0.4.30: rebuild-compat: {note}"]
    for render in (R.to_text, R.to_markdown, R.to_html):
        assert "calling" in render(c) and "used 9" in render(c)


def test_markdown(case):
    out = R.to_markdown(build(case))
    assert out.startswith("### reprobundle: `attention@3` across JAX versions")
    tables = re.findall(r"(?:^\|.*\n)+", out, re.M)
    assert len(tables) >= 4
    for t in tables:  # pipes inside cells are escaped: every row has as many cell separators as the header
        assert len({len(re.findall(r"(?<!\\)\|", line)) for line in t.splitlines()}) == 1, t
    assert "no route could load the function \\| deserialize" in out
    assert out.count("<details>") == out.count("</details>") >= 3
    assert "<most recent>" in out  # the failure's reason, verbatim inside a code block in <details>
    assert "<summary>jax 0.8.0 vs 0.7.2: " in out and "wrapped into fusions" in out
    assert "kCustom:\\_\\_ynn\\_fusion" in out  # no accidental bold from __ynn_fusion
    first_table = tables[0].splitlines()
    assert first_table[0] == "| version | median | time vs baseline (95% CI) | verdict | outputs vs packed |"
    before_details = out.split("<details>")[0]
    assert len(re.findall(r"(?:^\|.*\n)+", before_details, re.M)) == 1  # one narrow table, the rest collapsed


def test_markdown_per_op_rows_name_an_unchanged_op_once(case):
    out = R.to_markdown(build(case))
    assert "| dot\\_general.9 (dot) |" in out and "dot\\_general.9 → dot\\_general.9" not in out
    assert "reduce-window → wrapped\\_reduce-window (wrapped, reduce-window)" in out
    header = "| delta | ratio | baseline | candidate | op |"
    assert header in out  # the numbers first: they never scroll out of GitHub's comment column


def test_markdown_stays_within_an_issue_body(case):
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    runs[1]["per_op"] = [{"name": f"op{k}", "kind": "", "time_ns": float(k), "count": 1} for k in range(2000)]
    runs[-1]["reason"] = "Traceback:\n" + "  frame\n" * 5000 + "ValueError: the real error"
    out = R.to_markdown(C.build_comparison(manifest, runs, None, hlo_texts=texts, outputs=outputs))
    assert len(out) < 65536
    assert "ValueError: the real error" in out and "... and" in out


def test_html_is_self_contained_and_escaped(case):
    manifest, runs, texts, outputs = case
    runs = copy.deepcopy(runs)
    runs[-1]["reason"] = "<script>alert(1)</script>"
    page = R.to_html(C.build_comparison(manifest, runs, None, hlo_texts=texts, outputs=outputs))
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "&lt;script&gt;" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    svgs = {ET.fromstring(x).get("aria-label"): ET.fromstring(x) for x in re.findall(r"<svg.*?</svg>", page, re.S)}
    assert set(svgs) == {"time relative to jax 0.7.2", "timing samples per version"}
    ns = "{http://www.w3.org/2000/svg}"
    chart = svgs["timing samples per version"]
    labels = [t.text for t in chart.iter(f"{ns}text")]
    assert "0.7.2 (baseline)" in labels and "0.4.20" not in labels
    assert any(t and t.startswith("time per call (ms)") for t in labels)  # axis title with its unit
    assert {"baseline", "slower", "faster", "not timed together"} <= set(labels)  # the legend
    n_samples = sum(len(r["timing"]["samples_ns"]) for r in runs if r.get("timing"))
    n_samples += len(manifest["reference"]["timing"]["samples_ns"])
    assert len([c for c in chart.iter(f"{ns}circle") if c.get("r") == "1.8"]) == n_samples
    assert len([r for r in chart.iter(f"{ns}rect") if r.get("height") == "18"]) == 5  # one box per timed version
    ratio = svgs["time relative to jax 0.7.2"]
    texts_ = [t.text or "" for t in ratio.iter(f"{ns}text")]
    assert any(t.startswith("time per call relative to jax 0.7.2 (ratio, log scale") for t in texts_)
    assert "95% interval (paired)" in texts_ and "1x" in texts_
    colours = {c.get("fill") for c in ratio.iter(f"{ns}circle")} | {c.get("stroke") for c in ratio.iter(f"{ns}circle")}
    assert colours - {None, "white"} <= set(R.PALETTE.values())  # Okabe-Ito only
    assert "max-width:960px" in page and "overflow-x:auto" in page


def test_nice_ticks():
    assert R.nice_ticks(0.0, 10.0) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    ticks = R.nice_ticks(4.44e6, 26.27e6)
    assert ticks[0] >= 4.44e6 and ticks[-1] <= 26.27e6 and 4 <= len(ticks) <= 7
    assert all(t % 1e6 == 0 for t in ticks)
    assert R.nice_ticks(5.0, 5.0) == [5.0]


# ------------------------------------------------------------------------------------------------ live JAX


def test_installed_jax_against_the_0_7_2_fixture(case):
    """Replay-like: the installed JAX compiles and times the attention example; the report sets it against the
    0.7.2 fixture (HLO, samples, per-op profile) and diffs the fusion of two real compilers."""
    jax = pytest.importorskip("jax")
    import sys
    import time

    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    import attention

    _, args = attention.make()
    compiled = jax.jit(attention.attention).lower(*args).compile()
    out = np.asarray(compiled(*args))
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        jax.block_until_ready(compiled(*args))
        samples.append(time.perf_counter_ns() - t0)
    manifest, runs, texts, _ = case
    live = make_run("installed", samples, [])
    live["environment"]["jax"] = jax.__version__
    c = C.build_comparison(manifest, [runs[0], live], "0.7.2",
                           hlo_texts={"0.7.2": texts["0.7.2"], "installed": compiled.as_text()},
                           outputs={"installed": [out]})
    (d,) = c["diffs"]
    live_row = c["rows"][-1]
    assert live_row["jax"] == jax.__version__ and live_row["verdict"] in ("same", "slower", "faster")
    assert live_row["err_base"] is None  # no 0.7.2 outputs to compare with
    assert live_row["fusions"] == hlo_diff.fusion_summary(compiled.as_text())["n_fusions"]
    assert d["fusion"]["identical"] == (jax.__version__ == "0.7.2")
    assert "no per-op profile for installed" in d["moved"]
    assert d["fusion"]["summary"][:60] in R.to_text(c).replace("\n    ", " ")
    R.to_html(c), R.to_markdown(c)
