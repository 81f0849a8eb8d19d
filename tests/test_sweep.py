"""`reprobundle sweep` on the local executor: real bundles replayed on real releases (0.4.30, the oldest cached, and
the installed jax), one table worst first, resume, selection, reports; bisect's probes on an executor.

What differs between the versions is built to differ on any machine, for a reason that does not depend on timing:
- `special` uses `erf`, which jax exports (since 0.4.36) as a StableHLO composite that jaxlib 0.4.30 cannot read
  (its reader stops at StableHLO 1.1.3): incompatible there on any machine, so its outputs are "failed";
- `nanfast` was packed with XLA's fast math told to assume no NaN (XLA_FLAGS in the packing run), which folds
  `x != x` to false at compile time: its reference says no element is NaN, and every replay without those flags
  finds the NaN: "mismatch" against the packed reference, on any machine;
- `chain` (label team=llm) and `chain2` (team=infra) run everywhere with matching outputs.
No timing outcome is asserted: only that verdicts, ratios and the table's order agree with the stored runs.
"""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick
from chain import chain
from cli_runner import cli

import reprobundle
from reprobundle import api
from reprobundle.bundle.bundle_selection import select_bundles
from reprobundle.errors import UsageError
from reprobundle.fleet import sweep as sweeping
from reprobundle.fleet.connect import executor_for
from reprobundle.fleet.executor import LocalExecutor, ReplayTask
from reprobundle.render import sweep as sweep_render
from reprobundle.run.replay_options import ReplayOptions

pytestmark = pytest.mark.crossversion  # every test here sweeps 0.4.30 against the installed release
BASELINE, CANDIDATE = "0.4.30", "installed"
SWEEP = dict(rounds=2, repeat=6, warmup=1)


def _chain(n):
    return chain(n, rows=32, width=64, seed=n)


def _nan_count(x):
    return jnp.sum(x != x), jnp.where(x != x, 0.0, x)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A store with four bundles, swept once on 0.4.30 vs installed: (store, first sweep's data)."""
    store = str(tmp_path_factory.mktemp("sweep") / "store")
    for n, name, team in ((2, "chain", "llm"), (3, "chain2", "infra")):
        fn, args = _chain(n)
        reprobundle.pack(fn, *args, name=name, store=store, labels={"team": team}, **quick.PACK)
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    reprobundle.pack(jax.jit(lambda x: jax.scipy.special.erf(x) * 2), x, name="special", store=store,
                     labels={"team": "infra"}, **quick.PACK)
    with pytest.MonkeyPatch.context() as mp:  # the packing run only: replays run without these flags
        mp.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false")
        reprobundle.pack(jax.jit(_nan_count), np.where(x > 1, np.nan, x).astype(np.float32), name="nanfast",
                         store=store, labels={"team": "llm"}, **quick.PACK)
    seen = []
    data = api.sweep([], BASELINE, CANDIDATE, store=store, progress=seen.append, **SWEEP)
    assert seen[0].startswith("replaying 4 bundle(s) on jax 0.4.30 and installed") and seen[0].total == 4
    # one batch: its four bundles finish together, each line counting all four (the ETA is then 0, not 3x)
    assert [line.done for line in seen if line.phase == "sweep"] == [0, 4, 4, 4, 4]
    return store, data


def _by_ref(data):
    return {r["ref"]: r for r in data["results"]}


def test_the_table_says_what_each_bundle_came_to(swept):
    store, data = swept
    results = _by_ref(data)
    assert list(results) == ["chain@1", "chain2@1", "nanfast@1", "special@1"]  # selection order: by name
    assert all(r["status"] == "done" and not r["stored"] and r["host"] for r in results.values())
    special = results["special@1"]
    assert special["outputs"] == "failed" and sweeping.outcome(special) == "failed"
    old = special["runs"][0]
    assert (old["version"], old["status"]) == (BASELINE, "incompatible") and "composite" in old["reason"]
    assert special["ratio"] is None and special["verdict"] is None
    nanfast = results["nanfast@1"]
    assert nanfast["outputs"] == "mismatch" and [r["status"] for r in nanfast["runs"]] == ["mismatch", "mismatch"]
    assert "vs the packed reference" in nanfast["outputs_detail"]
    for ref in ("chain@1", "chain2@1"):
        r = results[ref]
        assert r["outputs"] == "ok" and [x["status"] for x in r["runs"]] == ["ok", "ok"], r
        assert [x["jax"] for x in r["runs"]] == [BASELINE, jax.__version__]
        assert r["ratio"] is not None and r["ratio"] > 0
        if r["verdict"] is not None:  # with a verdict, its interval holds the ratio and the direction agrees
            assert r["ci95"][0] <= r["ratio"] <= r["ci95"][1]
            assert r["verdict"] == "same" or (r["verdict"] == "slower") == (r["ratio"] > 1)
    # the ratios are the stored runs' own: `compare` of the same replay says the same
    registry = api.open_registry(store)
    for ref in ("chain@1", "nanfast@1"):
        row = next(x for x in api.compare(ref, [BASELINE, CANDIDATE], store=store, baseline=BASELINE)["rows"]
                   if x["requested"] == CANDIDATE)
        assert row["ratio"] == pytest.approx(results[ref]["ratio"]) and row["run_id"] == results[ref]["runs"][1]["run_id"]
    stored_ids = {r["run_id"] for b in registry.iter_bundles() for r in registry.runs(b.ref.bundle_id)}
    assert {x["run_id"] for r in results.values() for x in r["runs"]} == stored_ids
    assert data["counts"] == {**data["counts"], "total": 4, "failed": 1, "mismatch": 1, "stored": 0}
    assert sum(data["counts"][k] for k in ("slower", "faster", "same", "unsettled", "unjudged", "mismatch", "failed")) == 4
    # the table: worst ratio first, the failed bundle (no ratio) last, and the summary line
    text = sweep_render.to_text(data)
    order = [line.split()[0] for line in text.splitlines()[3:7]]
    ratios = {ref: results[ref]["ratio"] for ref in order[:3]}
    assert order[3] == "special@1" and list(ratios.values()) == sorted(ratios.values(), reverse=True), text
    assert text.splitlines()[-1].startswith(f"{data['counts']['slower']} slower, 1 mismatched, 1 failed, of 4")
    assert "failed:\n  special@1: jax 0.4.30: incompatible" in text and "mismatched:\n  nanfast@1" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_a_local_sweep_measures_its_bundles_together(swept):
    """The four bundles were one measurement (one group of runs), each version's worker process of a round serving
    every bundle; the one incompatible on 0.4.30 ended there without ending the others."""
    store, data = swept
    assert len({r["group"] for r in data["results"]}) == 1
    registry = api.open_registry(store)
    for bundle in registry.iter_bundles():
        runs = registry.runs(bundle.ref.bundle_id)
        timed = [r for r in runs if r["status"] in ("ok", "mismatch")]
        assert timed and all(r["environment"]["conditions"]["workers"] == "shared" for r in timed), bundle.ref
    fresh = sweeping.batches(list(registry.iter_bundles()), ReplayTask(store, "", (BASELINE, CANDIDATE),
                                                                      ReplayOptions(fresh_workers=True)),
                             LocalExecutor())
    assert fresh == [[0], [1], [2], [3]]


def test_a_mistyped_version_is_one_error_before_anything_runs(swept):
    store, _ = swept
    before = {r["run_id"] for b in api.open_registry(store).iter_bundles()
              for r in api.open_registry(store).runs(b.ref.bundle_id)}
    for call in (lambda: api.sweep([], BASELINE, "0.8.O", store=store),
                 lambda: api.isolate("chain", [BASELINE, "0.8.O"], store=store)):
        with pytest.raises(UsageError, match="'0.8.O' is not a JAX version"):
            call()
    registry = api.open_registry(store)
    assert {r["run_id"] for b in registry.iter_bundles() for r in registry.runs(b.ref.bundle_id)} == before


def test_a_resumed_sweep_shows_stored_results_and_rerun_replays(swept):
    store, first = swept
    again = api.sweep([], BASELINE, CANDIDATE, store=store, **SWEEP)
    assert all(r["stored"] and r["host"] is None for r in again["results"]) and again["counts"]["stored"] == 4
    ids = {r["ref"]: [x["run_id"] for x in r["runs"]] for r in first["results"]}
    assert {r["ref"]: [x["run_id"] for x in r["runs"]] for r in again["results"]} == ids
    for before, after in zip(first["results"], again["results"]):
        assert (after["ratio"], after["outputs"], after["verdict"]) == (before["ratio"], before["outputs"],
                                                                        before["verdict"])
    assert "stored" in sweep_render.to_text(again)
    # other timing options are another measurement: not resumed
    registry = api.open_registry(store)
    bundle = registry.resolve("chain")
    options = ReplayOptions(warmup=1, repeat=6, rounds=2, timeout_s=api.DEFAULT_TIMEOUT_S)
    assert [r["run_id"] for r in sweeping.stored_runs(registry, bundle, (BASELINE, CANDIDATE), options)] == ids["chain@1"]
    for other in ({"repeat": 12}, {"rounds": 3}, {"warmup": 2}, {"rounds": None}, {"pin": (0,)}):
        assert sweeping.stored_runs(registry, bundle, (BASELINE, CANDIDATE), replace(options, **other)) is None, other
    assert sweeping.stored_runs(registry, bundle, (CANDIDATE, "0.8.0"), options) is None  # another pair
    # a replay whose runs timed out may not time out again: not resumed past; the latest finished one is shown
    timed_out = api.sweep(["chain2"], BASELINE, CANDIDATE, store=store, rerun=True, timeout_s=0.2, **SWEEP)
    assert [x["status"] for x in timed_out["results"][0]["runs"]] == ["timeout", "timeout"]
    assert sweeping.outcome(timed_out["results"][0]) == "failed"
    (resumed,) = api.sweep(["chain2"], BASELINE, CANDIDATE, store=store, **SWEEP)["results"]
    assert resumed["stored"] and [x["run_id"] for x in resumed["runs"]] == ids["chain2@1"]
    # --rerun replays what it selects: new runs, the old ones kept
    rerun = api.sweep(["chain"], BASELINE, CANDIDATE, store=store, rerun=True, **SWEEP)
    (result,) = rerun["results"]
    assert not result["stored"] and set(x["run_id"] for x in result["runs"]).isdisjoint(ids["chain@1"])
    assert len(registry.runs(bundle.ref.bundle_id)) == 4


def test_selection_by_ref_glob_and_label(swept):
    store, _ = swept
    registry = api.open_registry(store)

    def names(patterns, labels=None):
        return [str(b.ref) for b in select_bundles(registry, patterns, labels)]

    assert names(["chain*"]) == ["chain@1", "chain2@1"]
    assert names(["chain?"]) == ["chain2@1"]
    assert names([], {"team": "llm"}) == ["chain@1", "nanfast@1"]
    assert names(["chain*"], {"team": "infra"}) == ["chain2@1"]
    assert names(["special@1", "special", "chain*@1"]) == ["special@1", "chain@1", "chain2@1"]  # each once
    with pytest.raises(UsageError, match="selects no bundle"):
        names(["nothing*"])
    code, out, err = cli("sweep", "chain*", "--label", "team=nobody", "--baseline", BASELINE, "--candidate",
                         CANDIDATE, store=store)
    assert code == 2 and out == "" and err.splitlines() == [
        f"error: nothing to sweep: chain* --label team=nobody selects no bundle in {store}",
        "hint: `reprobundle ls` lists the bundles and their labels; give refs, a name glob such as 'attn*' "
        "(quoted), or --label KEY=VALUE"]
    code, _, err = cli("sweep", "chain", "--baseline", "0.8.0", "--candidate", "0.8.0", store=store)
    assert code == 2 and "a baseline with at least one other version" in err


def test_sweep_max_time_bounds_each_bundles_timing_and_starts_no_round_past_it(swept, tmp_path):
    """#57: sweep --max-time is each bundle's: measured alone, its rounds adaptive within it, none begun past it
    (what every run records: when each round ended, from the replay's start; the first round always runs)."""
    import shutil

    store, _ = swept
    own = shutil.copytree(store, tmp_path / "store")  # its runs apart from the other tests' counts
    data = api.sweep(["chain"], BASELINE, CANDIDATE, store=str(own), rerun=True, warmup=1, repeat=6, max_time_s=2.0)
    (result,) = data["results"]
    registry = api.open_registry(str(own))
    ids = {x["run_id"] for x in result["runs"]}
    runs = [r for r in registry.runs(registry.resolve("chain").ref.bundle_id) if r["run_id"] in ids]
    assert len(runs) == 2 and {r["status"] for r in runs} <= {"ok", "mismatch"}
    for run in runs:
        schedule = run["environment"]["conditions"]["schedule"]
        assert schedule["max_time_s"] == 2.0 and len(schedule["round_ends_s"]) == schedule["rounds"] >= 1
        assert all(end < 2.0 for end in schedule["round_ends_s"][:-1]), schedule  # each round began within it


def test_cli_json_and_report(swept, tmp_path):
    store, first = swept
    report, page = tmp_path / "sweep.md", tmp_path / "sweep.html"
    code, out, err = cli("sweep", "--baseline", BASELINE, "--candidate", CANDIDATE, "--rounds", "2", "--repeat",
                         "6", "--warmup", "1", "--json", "--report", report, "--html", page, store=store)
    assert code == 9, err  # a bundle failed and one mismatched, as replay exits when a version is not ok
    data = json.loads(out)
    assert data["counts"]["total"] == 4 and data["counts"]["stored"] == 4  # resumed: nothing replayed
    assert data["results"][-1]["ref"] == "special@1" and "4 stored" in data["summary"]
    md = report.read_text()
    assert md.startswith(f"### reprobundle sweep: jax {jax.__version__} (installed) vs {BASELINE}")
    assert "1 mismatched, 1 failed, of 4" in md and md.count("\n| ") == 5  # header and 4 rows
    for r in data["results"]:  # each bundle's Reproduce line: the replay command with the same timing options
        command = r["reproduce"]["command"]
        assert command in md and command.startswith("reprobundle replay ")
        assert f"--jax {BASELINE} --jax {jax.__version__} --repeat 6 --rounds 2 --warmup 1" in command
    assert "Not shareable yet" in md  # a local folder store: the report says to attach the zips
    assert "<table" in page.read_text() and "special@1" in page.read_text()


def test_a_task_that_raises_is_a_failed_result(swept):
    store, _ = swept
    tasks = [ReplayTask(store, "missing", (BASELINE, CANDIDATE)),
             ReplayTask(store, "chain", (CANDIDATE,), ReplayOptions(platform="no-such-platform"))]
    results = dict(LocalExecutor().run(sweeping.run_replay_task, tasks))
    assert sorted(results) == [0, 1] and all(r["status"] == "failed" for r in results.values())
    assert "no bundle named 'missing'" in results[0]["error"] and "no-such-platform" in results[1]["error"]
    with pytest.raises(UsageError, match="unknown replay option"):  # a task from another reprobundle, as data
        ReplayTask.from_dict({**tasks[1].to_dict(), "options": {"bad": 1}})
    assert all(json.loads(json.dumps(r)) == r for r in results.values())  # plain data: it crosses machines
    assert isinstance(executor_for(None), LocalExecutor)  # (--ray without Ray: tests/test_sweep_ray.py)


def test_bisect_probes_run_on_the_executor(swept):
    store, _ = swept

    class Recording(LocalExecutor):
        tasks: list = []

        def run(self, fn, tasks):
            self.tasks.extend(tasks)
            return super().run(fn, tasks)

    executor = Recording()
    with pytest.raises(UsageError, match=rf"the good version {BASELINE} did not run \(incompatible\): incompatible with jax"):
        api.bisect("special", BASELINE, "0.8.0", store=store, executor=executor, repeat=4, rounds=2, warmup=1)
    (task,) = executor.tasks  # the first probe, the endpoints run together (outputs first), ran on the executor given
    assert task.versions == (BASELINE, "0.8.0") and task.options.dump is False
    registry = api.open_registry(store)
    runs = registry.runs(registry.resolve("special").ref.bundle_id)
    assert {r["requested"] for r in runs if r["group"] == runs[-1]["group"]} == {BASELINE, "0.8.0"}
