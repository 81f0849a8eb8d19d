"""The bug report end to end: a multi-version replay's output starts with the headlines and fits 100 columns; the
Markdown report's Reproduce block holds a command that, pasted into a shell beside the attached zip, replays the
bundle; the zip replays itself with nothing but JAX; `compare` says which runs it used; `push` carries the runs;
`url` keeps its warning inside the snippet; colour only on a terminal (NO_COLOR honoured); progress has phases,
elapsed time and an ETA."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import pytest
import quick
from cli_runner import cli
from small_bundle import copy_of

from reprobundle.analysis import verdict
from reprobundle.bundle.registry import Registry
from reprobundle.render.progress import Progress, clock
from reprobundle.worker import tolerance

EXE = Path(sys.executable).with_name("reprobundle")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def replayed(small_store_template, tmp_path_factory):
    """small@1 replayed on installed twice, timed together in 3 rounds, with a Markdown and an HTML report."""
    root = tmp_path_factory.mktemp("report")
    store, reports = root / "store", root / "issue"
    copy_of(small_store_template, store)
    code, out, err = cli("replay", "small@1", "--jax", "installed", "--jax", "installed", "--rounds", "3", *quick.REPLAY_ARGS,
                         "--report", reports / "report.md", "--html", reports / "report.html", store=store)
    assert code == 0, err
    return {"store": store, "reports": reports, "out": out, "err": err}


def test_replay_output_starts_with_the_headline_and_fits_100_columns(replayed):
    lines = replayed["out"].splitlines()
    assert re.match(r"jax \S+ \(installed #2\) is .* jax \S+ \(installed\)", lines[0]), lines[0]
    head = replayed["out"].split("\n\n")[0].replace("\n    ", " ")
    # one interval: the 95% CI, or for an unsettled verdict the equivalence interval it was judged on
    assert re.search(r"(95% CI [0-9.]+-[0-9.]+x; |a change between [0-9.]+x and [0-9.]+x is not ruled out \()"
                     r"paired, 3 rounds timed together; p=", head), head
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert not ANSI.search(replayed["out"])  # not a terminal: no colour
    assert "Not timed together with the baseline (not comparable, no verdict):" in replayed["out"]
    apart = replayed["out"].split("Not timed together")[1].split("\n\n")[0]
    assert "reference" in apart and "p=" not in apart


def test_progress_has_phases_elapsed_time_and_an_eta(replayed):
    err = replayed["err"].splitlines()
    progress = [line for line in err if line.startswith("[")]
    assert any(re.match(r"\[\d+:\d\d\] round 1/3: loading and compiling on jax installed", l) for l in progress)
    assert any(re.match(r"\[\d+:\d\d, ETA \d+:\d\d\] round 3/3: timing", l) for l in progress), progress
    assert any("finishing (profiles, outputs)" in l for l in progress)
    assert all(len(line) <= 100 for line in progress)


def test_pack_shows_its_phases(tmp_path):
    script = tmp_path / "f.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "def make():\n    return jax.jit(lambda x: jnp.sin(x) * 2), (jnp.ones((4, 4)),)\n")
    code, out, err = cli("pack", script, "--name", "f", "--repeat", "3", "--no-dump", store=tmp_path / "s")
    assert code == 0, err
    phases = [re.sub(r"^\[[^\]]*\] ", "", line) for line in err.splitlines()]
    assert [p.split(" ")[0] for p in phases] == ["running", "exporting", "storing", "reference", "publishing"], err


def test_markdown_report_has_headline_narrow_table_and_reproduce_block(replayed):
    md = (replayed["reports"] / "report.md").read_text()
    lines = md.splitlines()
    assert lines[0] == "### reprobundle: `small@1` across JAX versions" and lines[2].startswith("- jax ")
    assert "| version | median | time vs baseline (95% CI) | verdict | outputs vs packed |" in md
    block = md.split("#### Reproduce")[1].split("<details>")[0]
    assert "**Bundle:** attach `small-1.zip`" in block
    command = re.search(r"```sh\n(reprobundle replay .*)\n```", block).group(1)
    version = jax.__version__
    assert command == f"reprobundle replay small-1.zip --jax {version} --jax {version} --repeat 3 --rounds 3 " \
                      "--warmup 1"
    assert "python3 -m venv" in block and f"jax=={version} msgpack flatbuffers" in block
    assert (replayed["reports"] / "small-1.zip").is_file()  # written beside the report, to attach
    html = (replayed["reports"] / "report.html").read_text()
    assert "<h2>Reproduce</h2>" in html and "small-1.zip" in html
    assert html.index("class='headline") < html.index("<h2>Reproduce</h2>") < html.index("<svg")


def test_the_attached_zip_replays_with_nothing_but_jax(replayed):
    """`python small-1.zip`: the zip's own __main__ runs the worker package it carries; no reprobundle needed
    (-I: isolated, so nothing from this checkout is importable; jax, numpy and msgpack come from site-packages)."""
    done = subprocess.run([sys.executable, "-I", "small-1.zip", "--repeat", "3", "--json"],
                          cwd=replayed["reports"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "ok" and summary["outputs_ok"] and summary["jax"] == jax.__version__
    assert summary["bundle"] == "small@1" and summary["n"] == 3
    with zipfile.ZipFile(replayed["reports"] / "small-1.zip") as zf:
        names = zf.namelist()
    assert "__main__.py" in names and "reprobundle_worker/standalone.py" in names
    assert not any(n.startswith("reprobundle/") for n in names)  # the worker alone, not the host package


def test_a_damaged_zip_says_so_and_exits_3(replayed, tmp_path):
    src = replayed["reports"] / "small-1.zip"
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.startswith("blobs/") and len(data) > 100:
                data = data[:-1] + bytes([data[-1] ^ 1])
            zout.writestr(info, data)
    done = subprocess.run([sys.executable, "-I", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "corrupt" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.crossversion
def test_the_reproduce_command_pasted_into_a_shell_replays_the_bundle(small_store_template, tmp_path):
    """Report a replay on two released versions; paste the block's command into a shell in the folder holding the
    attached zip (as a maintainer would, with an empty store of their own): it replays both versions."""
    store, issue = tmp_path / "store", tmp_path / "issue"
    copy_of(small_store_template, store)
    code, out, err = cli("replay", "small@1", "--jax", "0.4.30", "--jax", "0.7.2", "--rounds", "2", *quick.REPLAY_ARGS,
                         "--report", issue / "report.md", store=store)
    assert code == 0, err
    command = re.search(r"```sh\n(reprobundle replay .*)\n```", (issue / "report.md").read_text()).group(1)
    assert command.startswith("reprobundle replay small-1.zip --jax 0.4.30 --jax 0.7.2")
    maintainer = tmp_path / "maintainer"
    maintainer.mkdir()
    (maintainer / "small-1.zip").write_bytes((issue / "small-1.zip").read_bytes())  # the attachment, downloaded
    env = {**os.environ, "PATH": f"{EXE.parent}:{os.environ['PATH']}", "REPROBUNDLE_STORE": str(tmp_path / "theirs")}
    done = subprocess.run(["bash", "-c", command + " --json"], cwd=maintainer, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert [(r["requested"], r["status"]) for r in runs] == [("0.4.30", "ok"), ("0.7.2", "ok")]


def test_compare_prefers_the_latest_replay_timed_together_and_says_which(replayed, tmp_path):
    """The fixture's store holds a replay of two versions timed together; a later single-version run of 4 calls must
    not replace either: compare picks the replay timed together and says which runs it used."""
    store = tmp_path / "store"
    shutil.copytree(replayed["store"], store)
    assert cli("replay", "small@1", "--jax", "installed", *quick.REPLAY_ARGS, store=store)[0] == 0  # later, alone
    code, out, err = cli("compare", "small@1", "--json", store=store)
    assert code == 0, err
    c = json.loads(out)
    used = {u["label"]: u for u in c["runs_used"]}
    assert set(used) == {"reference", "installed", "installed #2"}
    assert used["installed #2"]["together"] and "in 3 rounds" in used["installed"]["budget"]
    assert c["selection"].startswith("compared the latest replay that timed installed, installed together")
    runs = Registry.open(store).runs(Registry.open(store).resolve("small@1").ref.bundle_id)
    together = [r for r in runs if len([x for x in runs if x.get("group") == r.get("group")]) == 2]
    assert len(runs) == 3 and {u["run_id"] for u in c["runs_used"] if u["run_id"]} == {r["run_id"] for r in together}
    code, out, err = cli("compare", "small@1", store=store)
    assert code == 0 and "Runs used:" in out and used["installed"]["run_id"] in out
    assert max(len(line) for line in out.splitlines()) <= 100
    code, out, err = cli("compare", "small@1", "--jax", "installed", "--json", store=store)
    assert code == 0 and len([u for u in json.loads(out)["runs_used"] if u["run_id"]]) == 1
    # A version named twice compares two distinct runs timed together (it once compared one run with itself).
    code, out, err = cli("compare", "small@1", "--jax", "installed", "--jax", "installed", "--json", store=store)
    named_twice = [u["run_id"] for u in json.loads(out)["runs_used"] if u["run_id"]]
    assert code == 0 and len(set(named_twice)) == 2 and set(named_twice) == {r["run_id"] for r in together}


def test_push_copies_the_runs_unless_told_not_to(replayed, tmp_path):
    store = replayed["store"]
    code, out, err = cli("push", "small@1", "--to", tmp_path / "shared", "--json", store=store)
    assert code == 0, err
    assert json.loads(out)["runs_copied"] == 2
    shared = Registry.open(tmp_path / "shared")
    runs = shared.runs(shared.resolve("small@1").ref.bundle_id)
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert all(shared.verify_blob(r["outputs"][0]["blob"]["digest"]) is None for r in runs)
    code, out, err = cli("push", "small@1", "--to", tmp_path / "shared", store=store)
    assert code == 0 and "runs: 0 copied, 2 already there" in out
    code, out, err = cli("push", "small@1", "--to", tmp_path / "bare", "--no-runs", "--json", store=store)
    assert code == 0 and json.loads(out)["runs_copied"] == 0
    bare = Registry.open(tmp_path / "bare")
    assert bare.runs(bare.resolve("small@1").ref.bundle_id) == []


@pytest.mark.slow
def test_url_snippet_of_a_local_store_and_of_a_zip(small_store_template, tmp_path, monkeypatch):
    store = copy_of(small_store_template, tmp_path / "store")
    code, out, err = cli("url", "small@1", store=store)
    assert code == 0 and err == ""  # the warning is inside the snippet, not lost on stderr
    snippet = out.split("Paste into the issue:")[1]
    assert "**Not shareable yet:**" in snippet and "file://" not in snippet
    assert "attach `small-1.zip`" in snippet and "pip install reprobundle" not in snippet
    assert f"reprobundle replay small-1.zip --jax {jax.__version__}" in snippet
    cli("export", "small@1", "-o", tmp_path / "small-1.zip", store=store)
    monkeypatch.setenv("REPROBUNDLE_STORE", str(store))  # where replays of the zip's copy are recorded
    assert cli("replay", tmp_path / "small-1.zip", *quick.REPLAY_ARGS)[0] == 0
    code, out, err = cli("url", tmp_path / "small-1.zip", "--jax", "0.7.2", "--jax", "0.8.0")
    assert code == 0, err
    assert "reprobundle replay small-1.zip --jax 0.7.2 --jax 0.8.0" in out and str(tmp_path) not in out.split(
        "Paste into the issue:")[1]
    monkeypatch.setenv("REPROBUNDLE_INSTALL", 'pip install "reprobundle @ git+https://example.org/r.git@v1"')
    code, out, err = cli("url", tmp_path / "small-1.zip", "--json")
    info = json.loads(out)
    assert info["reproduce"]["install"].startswith('pip install "reprobundle @ git+')
    assert info["reproduce"]["command"] == f"reprobundle replay small-1.zip --jax {jax.__version__}"


def _run_in_pty(argv: list[str], env: dict) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_colour_only_on_a_terminal_and_never_with_no_color(replayed):
    env = {**os.environ, "REPROBUNDLE_STORE": str(replayed["store"]), "COLUMNS": "100", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    plain = _run_in_pty([str(EXE), "compare", "small@1"], {**env, "NO_COLOR": "1"})
    assert not ANSI.search(plain) and "baseline" in plain
    assert max(len(line.rstrip("\r")) for line in plain.splitlines()) <= 100
    assert not re.search(r"VERSION +JAX +STATUS", plain)
    wide = _run_in_pty([str(EXE), "compare", "small@1"], {**env, "COLUMNS": "160"})
    assert ANSI.search(wide) and "baseline" in wide  # a terminal without NO_COLOR: verdicts in colour
    wide = ANSI.sub("", wide)
    assert re.search(r"VERSION +JAX +STATUS", wide) and "COMPILE" in wide  # a wide terminal shows every column


def test_progress_to_a_file_is_said_whole(monkeypatch):
    """Progress on a file or a pipe (a log, CI) keeps each line whole; only a terminal's are cut to its width."""
    import io

    from reprobundle.cli import common

    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    sink = common.progress_sink()
    sink("bisect: " + "x" * 300 + " the end")
    common.close_progress()
    assert out.getvalue().rstrip().endswith("x" * 300 + " the end") and "…" not in out.getvalue()


def test_progress_estimates_the_time_left():
    lines: list[str] = []

    class Out:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass

    from reprobundle.logs import Status

    p = Progress(Out(), live=False)
    p._done_at = {}
    p(Status("round 1/4: timing", "round", 0, 4))
    assert p.eta() is None
    p._done_at[0] -= 30  # round 1 (with compiling) took 30 s
    p(Status("round 2/4: timing", "round", 1, 4))
    assert 85 <= p.eta() <= 91  # 3 rounds left at 30 s
    p._done_at[1] -= 10
    p._done_at[0] -= 10
    p(Status("round 3/4: timing", "round", 2, 4))  # from now on the pace of rounds after the first: 10 s
    assert 15 <= p.eta() <= 21
    shown = "".join(lines).splitlines()
    assert shown[-1].startswith("[0:") and "ETA 0:" in shown[-1] and shown[-1].endswith("round 3/4: timing")
    assert clock(3725) == "1:02:05" and clock(42) == "0:42"


def test_the_zips_tolerance_is_the_hosts():
    """One definition: the host's output check uses the worker package's tolerances, which the zip carries."""
    assert verdict.tolerance_for is tolerance.tolerance_for and verdict.scaled_atol is tolerance.scaled_atol
    assert tolerance.tolerance_for("float32") == (1e-4, 1e-5) and tolerance.tolerance_for("int32") == (0.0, 0.0)