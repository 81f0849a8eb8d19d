"""The zip is the reproducer: `python NAME.zip` judges what the bundle's stored answer found (bundle/zip_expectation.py,
investigate/report/reproducer_zip.py, worker/standalone.py), in fresh environments holding only jax, jaxlib and numpy of
real releases: it exits 1 on the bad release and 0 on the good one for a change in JAX's lowering (retraced), a
compiler's change in the last bits (frozen, any bit), an error, and a slowdown (`--compare`); a zip with no answer
replays against its packed reference as zips always did.

One store per module, each answer stored by a real bisection of a two-release window (api.bisect), on releases the
suite already installs (0.4.38, 0.5.0, 0.5.1: tests/test_script.py's and tests/test_bisect_layers.py's); rng's and
colsum's bisections are the suite's shared ones (tests/shared_stores.py)."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from cli_runner import cli
from quick import PACK

import reprobundle

PROGRAMS = Path(__file__).parent / "programs" / "retrace"
pytestmark = pytest.mark.crossversion


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """rng (its draw changes when 0.5.0 retraces it), colsum (its sums' last bits change with jaxlib 0.5.1, frozen),
    solve (0.5.0 refuses its batched 1-D solve), each bisected over its two releases, untimed; slow (retraced, 0.5.1
    runs 400 laps of its loop where 0.5.0 runs one), packed: its time bisection is its own test's (a busy machine
    may take many rounds to settle it, and no other test waits on that); plain (no answer). rng's and colsum's
    bisections are the suite's shared ones (tests/shared_stores.py: tests/test_script.py and tests/test_issue_body.py
    start from them too)."""
    from shared_stores import bisected_rng_and_colsum, bisection_of

    folder = bisected_rng_and_colsum(tmp_path_factory)
    store = str(folder)
    for name, program in (("solve", "batched_solve.py"), ("slow", "slower_later.py"), ("plain", "colsum.py")):
        reprobundle.api.pack_script(str(PROGRAMS / program), name=name, store=store, **PACK)
    reprobundle.api.bisect("solve", "0.4.38", "0.5.0", mode="retrace", store=store, warmup=1, repeat=2, rounds=1)
    found = [bisection_of(folder, name) for name in ("rng", "colsum", "solve")]
    assert [(r["criterion"], r["mode"], r["last_good"], r["first_bad"]) for r in found] == [
        ("outputs vs good", "retrace", "0.4.38", "0.5.0"), ("bits", "frozen", "0.5.0", "0.5.1"),
        ("error", "retrace", "0.4.38", "0.5.0")], found
    return folder


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """version -> the Python of an environment with only jax, jaxlib and numpy of that release (uv, from its
    cache)."""
    from test_script import _fresh

    return {v: _fresh(tmp_path_factory, v) for v in ("0.4.38", "0.5.0", "0.5.1")}


def _export(store, tmp_path, name) -> Path:
    out = tmp_path / f"{name}.zip"
    code, _, err = cli("export", name, "-o", out, store=store)
    assert code == 0, err
    return out


def _run(python, zip_path: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run([str(python), "-I", str(zip_path), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=zip_path.parent)


def _said(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def test_a_lowering_change_is_retraced_against_the_last_good_releases_outputs(store, tmp_path, fresh):
    zipped = _export(store, tmp_path, "rng")
    record = json.loads(zipfile.ZipFile(zipped).read("reproducer.json"))
    assert (record["criterion"], record["mode"], record["good"], record["bad"]) == ("outputs", "retrace", "0.4.38",
                                                                                    "0.5.0")
    good, bad = _run(fresh["0.4.38"], zipped), _run(fresh["0.5.0"], zipped, "--json")
    assert good.stdout.splitlines()[0].startswith(
        "checks: outputs within tolerance against jax 0.4.38's (the last good release), the program retraced by "
        "this JAX"), _said(good)
    assert good.returncode == 0 and "result: as the last good release: jax 0.4.38 gives the outputs of jax " \
        "0.4.38" in good.stdout, _said(good)
    data = json.loads(bad.stdout)
    assert bad.returncode == 1 and (data["criterion"], data["verdict"], data["route"]) == (
        "outputs", "regression", "retrace"), _said(bad)
    assert data["checks"] == good.stdout.splitlines()[0] and "elements outside tolerance" in data["problem"]
    packed = _run(fresh["0.5.0"], zipped, "--packed")  # as before: the frozen module against the packed outputs
    assert packed.returncode == 0 and not packed.stdout.startswith("checks:"), _said(packed)
    code, out, err = cli("show", str(zipped), "--json")  # reprobundle reads the zip as a store, the record aside
    assert code == 0 and json.loads(out)["manifest"]["name"] == "rng", err
    (tmp_path / "attached").mkdir()
    code, out, err = cli("issue", "rng", "--attach", tmp_path / "attached", store=store)
    assert code == 0, err
    (attached,) = (tmp_path / "attached").glob("*.zip")  # the report's zip judges the same answer
    assert json.loads(zipfile.ZipFile(attached).read("reproducer.json")) == record


def test_a_record_of_a_newer_version_is_refused_with_exit_3(store, tmp_path, fresh):
    zipped = _export(store, tmp_path, "rng")
    newer = tmp_path / "newer.zip"
    with zipfile.ZipFile(zipped) as src, zipfile.ZipFile(newer, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "reproducer.json":
                data = json.dumps(dict(json.loads(data), format_version=2)).encode()
            dst.writestr(info, data)
    done = _run(fresh["0.5.0"], newer)
    assert done.returncode == 3 and "export the zip again" in done.stderr, _said(done)


def test_a_compiler_change_in_the_last_bits_is_judged_bit_for_bit(store, tmp_path, fresh):
    zipped = _export(store, tmp_path, "colsum")
    good, bad = _run(fresh["0.5.0"], zipped), _run(fresh["0.5.1"], zipped, "--json")
    assert good.stdout.startswith("checks: every bit of the outputs against jax 0.5.0's (the last good release), "
                                  "the frozen module compiled by this JAX"), _said(good)
    assert good.returncode == 0 and "outputs:  bit-identical" in good.stdout, _said(good)
    data = json.loads(bad.stdout)
    assert bad.returncode == 1 and (data["verdict"], data["criterion"], data["outside_tolerance"]) == (
        "regression", "bits", 0), _said(bad)
    assert 0 < data["differing_elements"] <= 64 and 0 < data["max_abs_err"] < 1e-3, data
    assert "elements differ in their bits (max abs err" in data["problem"] and "within the tolerance" in data["problem"]


def test_an_error_where_the_good_release_ran_is_the_regression(store, tmp_path, fresh):
    zipped = _export(store, tmp_path, "solve")
    good, bad = _run(fresh["0.4.38"], zipped), _run(fresh["0.5.0"], zipped)
    assert good.stdout.startswith("checks: that it runs, as on jax 0.4.38 (the last good release), the program "
                                  "retraced by this JAX"), _said(good)
    assert good.returncode == 0, _said(good)
    assert bad.returncode == 1 and "result: ERROR on jax 0.5.0, where jax 0.4.38 ran" in bad.stdout, _said(bad)
    assert "Invalid shapes for solve" in bad.stdout


@pytest.fixture(scope="module")
def slow_changes(store):
    """slow bisected from 0.5.0 to 0.5.1 with no flag, as a user asks: two changes at one release, each found on its
    own, the headline the slowdown (0.5.1 traces 400 laps of its loop where 0.5.0 traces one: real on any machine),
    then its column sum's last bits (jaxlib 0.5.1, within the tolerance). The slowdown is JAX's lowering's, never in
    the frozen module (the same laps on both): found because the endpoints' retraced runs were lowered to other
    StableHLO, so the retraced program's time was screened beside the frozen module's. Adaptive rounds of 3 steps
    (the default cap): a quiet machine settles ~100x in the first three, a busy one goes on until the confirmation
    settles it too."""
    found = reprobundle.api.bisect("slow", "0.5.0", "0.5.1", store=str(store), warmup=1, repeat=24)[0]
    assert (found.criterion, found.mode, found.last_good, found.first_bad) == ("time", "retrace", "0.5.0", "0.5.1")
    assert found.mode_why.startswith("bisected by time (frozen), then time (retraced) unless the frozen module is "
                                     "found slower, then bits (retraced) ")
    assert [(c.criterion, c.mode, c.last_good, c.first_bad) for c in found.changes] == [
        ("bits", "retrace", "0.5.0", "0.5.1")]
    assert ("time", "frozen") in [(s["criterion"], s["mode"]) for s in found.set_aside]  # its screen: no slowdown
    return found


def test_a_slowdown_is_judged_by_compare_of_the_two_releases(store, slow_changes, tmp_path, fresh):
    zipped = _export(store, tmp_path, "slow")
    record = json.loads(zipfile.ZipFile(zipped).read("reproducer.json"))
    assert (record["criterion"], record["compare"]) == ("time", ["0.5.0", "0.5.1"])
    alone = _run(fresh["0.5.1"], zipped)  # one release cannot show a slowdown: it says how to compare
    assert alone.returncode == 0 and "--compare 0.5.0 0.5.1" in alone.stdout.splitlines()[0], _said(alone)
    slower = _run(fresh["0.5.0"], zipped, "--compare", str(fresh["0.5.0"]), str(fresh["0.5.1"]), "--rounds", "1")
    assert slower.returncode == 1 and "result: SLOWER: B is" in slower.stdout, _said(slower)
    # the good release as B: faster, never a slowdown (the same built difference, so one round tells it everywhere)
    good = _run(fresh["0.5.0"], zipped, "--compare", str(fresh["0.5.1"]), str(fresh["0.5.0"]), "--rounds", "1")
    assert good.returncode == 0 and "result: faster, not a slowdown" in good.stdout, _said(good)
    nouv = dict(os.environ, PATH="/nonexistent", JAX_PLATFORMS="cpu")  # no uv: the two commands to run, exit 3
    manual = subprocess.run([str(fresh["0.5.0"]), "-I", str(zipped), "--compare"], env=nouv, capture_output=True,
                            text=True, timeout=120)
    assert manual.returncode == 3 and "pip install jax==0.5.1 numpy" in manual.stdout, _said(manual)


def test_a_zip_with_no_answer_replays_against_its_packed_reference_as_before(store, tmp_path, fresh):
    zipped = _export(store, tmp_path, "plain")
    assert "reproducer.json" not in zipfile.ZipFile(zipped).namelist()
    done = _run(fresh["0.5.1"], zipped)
    assert done.returncode == 0 and done.stdout.startswith("plain@1 ("), _said(done)  # no "checks:" line
    assert "(against those packed on jax" in " ".join(done.stdout.split()), _said(done)


def _printed(line: str) -> tuple[list[str], int]:
    """A reproducer's printed line (`COMMAND   # exit N`): its words and the exit code it says."""
    import shlex

    command, _, said = line.partition("   # exit ")
    return shlex.split(command), int(said.split()[0])


def _as_printed(words: list[str], fresh: dict, folder: Path) -> subprocess.CompletedProcess:
    """A printed line run with plain jax: `uv run ... --with jax==V ... python FILE ARGS` in the environment of V
    holding only jax, jaxlib and numpy; `python FILE --compare A B` with its sides' releases as those environments'
    Pythons (one round: the slowdown is built to be real in any one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["JAX_PLATFORMS"] = "cpu"
    if words[0] == "uv":
        release = next(w.split("==", 1)[1] for w in words if w.startswith("jax=="))
        python, args = fresh[release], words[words.index("python") + 1:]
    else:
        assert words[0] == "python" and "--compare" in words, words
        python, args = fresh["0.5.0"], [str(fresh[w]) if w in fresh else w for w in words[1:]] + ["--rounds", "1"]
    return subprocess.run([str(python), "-I", *args], env=env, capture_output=True, text=True, timeout=600,
                          cwd=folder)


def test_a_slowdown_and_a_change_of_bits_at_one_release_each_exit_as_printed_with_plain_jax(store, slow_changes,
                                                                                           tmp_path, fresh):
    """#63 (einsum's report shipped the reproducer of its second row under a slowdown headline, and a `--compare`
    that exited 2): every change the table lists has its lines, the headline's first, in the issue's first screen
    (the zip: the script is too long to paste beside the body) and in the script's header, and each line as printed
    exits as it says with plain jax: the slowdown's `--compare 0.5.0 0.5.1` 1, the bits' check 0 on 0.5.0 and 1 on
    0.5.1."""
    from markdown_it import MarkdownIt

    (tmp_path / "attached").mkdir()
    code, out, err = cli("issue", "slow", "--json", "--attach", tmp_path / "attached", store=store)
    assert code == 0, err
    data = json.loads(out)
    assert [(r["kind"], r["release"], r["last_good"]) for r in data["changes"]] == [
        ("slower", "0.5.1", "0.5.0"), ("bits", "0.5.1", "0.5.0")]
    zipped = next((tmp_path / "attached").glob("*.zip"))
    record = json.loads(zipfile.ZipFile(zipped).read("reproducer.json"))
    assert [(r["row"], r["criterion"], r["mode"]) for r in record["changes"]] == [(1, "time", "retrace"),
                                                                                 (2, "bits", "retrace")]
    visible = data["body"].split("<details>", 1)[0]  # the first screen
    block = next(t.content for t in MarkdownIt("commonmark").parse(visible) if t.type == "fence" and t.info == "sh")
    zip_lines = [line for line in block.splitlines() if not line.startswith("#")]
    assert zip_lines[0] == f"python {zipped.name} --compare 0.5.0 0.5.1   # exit 1", block  # the headline's first
    assert [_printed(line)[1] for line in zip_lines] == [1, 0, 1] and all("--change 2" in x for x in zip_lines[1:])
    script = tmp_path / "attached" / "slow-1.py"
    code, _, err = cli("script", "slow", "-o", script, store=store)
    assert code == 0, err
    header = [line[4:] for line in script.read_text().splitlines() if line.startswith("#   ") and "# exit " in line]
    assert [_printed(line)[1] for line in header] == [1, 0, 1] and header[0].startswith("python slow-1.py --compare")
    for line in zip_lines + header:
        words, said = _printed(line)
        done = _as_printed(words, fresh, zipped.parent)
        assert done.returncode == said, f"{line}\n{_said(done)}"


def test_a_slowdown_beside_a_change_of_bits_at_one_release_has_its_own_cells(store, slow_changes, tmp_path):
    """#63 (gamma's 1.04x slowdown row borrowed the commit, "documented" and layer of the outputs change at its
    release, and its first screen's Cause was another change's): the bits change's explanation and first bad commit
    stored as investigate's steps store them (over its own stored runs) are on its row alone; the slowdown's row says
    "-" where nothing was measured for it, its layer is what its own check measured, and the first screen, of the
    slowdown, shows neither that cause nor that commit."""
    import shutil

    from reprobundle.bundle.registry import Registry
    from reprobundle.investigate.answers import store_commit_bisection, store_explanation

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    registry = Registry.open(str(copy))
    bundle = registry.resolve("slow")
    own = [a for a in registry.answers(bundle.ref.bundle_id) if a["answer_id"] == slow_changes.changes[0].answer_id]
    runs = [r for r in registry.runs(bundle.ref.bundle_id) if r["run_id"] in set(own[0]["runs"])]
    change = {"kind": "flag", "name": "xla_cpu_enable_fast_math", "a": False, "b": True, "baseline": "0.5.0",
              "candidate": "0.5.1", "type": "bool"}
    store_explanation(registry, bundle, {
        "baseline": "0.5.0 retraced", "candidate": "0.5.1 retraced", "platform": "cpu", "mode": "retrace",
        "by": "bits", "diagnosis": {"kind": "workaround", "summary": "the column sums' bits come back with "
                                    "--xla_cpu_enable_fast_math=false", "default": change, "lines": {}},
        "experiments": [], "runs": runs}, "reprobundle explain slow --jax 0.5.0 --jax 0.5.1 --retrace --by bits")
    sha = "c0ffee" * 6 + "c0ff"
    store_commit_bisection(registry, bundle, {
        "good": "0.5.0", "bad": "0.5.1", "criterion": "bits", "ends": {"agree": True}, "skipped": [], "text": "",
        "first_bad": {"sha": sha, "title": "Sum rows (#2496)", "pr": None},
        "notes": {"entry": "Column sums may differ in their last bits.", "release": "0.5.1"}}, runs,
        "reprobundle bisect-commits slow --good 0.5.0 --bad 0.5.1")
    other = "0ddba11" * 5 + "00000"  # a later commit bisection of these releases by outputs: another kind of change
    store_commit_bisection(registry, bundle, {
        "good": "0.5.0", "bad": "0.5.1", "criterion": "outputs vs good", "ends": {"agree": True}, "skipped": [],
        "text": "", "first_bad": {"sha": other, "title": "Other values", "pr": None}}, runs,
        "reprobundle bisect-commits slow --good 0.5.0 --bad 0.5.1")
    code, out, err = cli("issue", "slow", "--json", store=copy)
    assert code == 0, err
    data = json.loads(out)
    slower, bits = data["changes"]
    assert (slower["kind"], slower["layer"], slower["commit"], slower["cause"], slower["intended"]) == (
        "slower", "JAX's lowering", None, None, None), slower  # the frozen module is not slower: measured so
    assert (bits["commit"], bits["cause"]) == (sha[:10], "the default of xla_cpu_enable_fast_math changed"), bits
    assert bits["intended"].endswith("Column sums may differ in their last bits.") and bits["within"] is True
    import re

    assert re.fullmatch(r"\d+ of 64 elements of output 0, up to \d+ ULP", bits["how_much"]), bits["how_much"]
    first = data["body"].split("<details>", 1)[0]
    assert "| slower | " in first and "| last bits, within the tolerance | " in first
    assert "fast\\_math" not in first.split("| jax | kind |")[0] and "**Cause:**" not in first  # the slowdown's own
    assert sha[:10] not in first.replace(f"`{sha[:10]}`", "") and "Documented change" not in first
    assert other[:10] not in data["body"]  # of no change listed: on no row
