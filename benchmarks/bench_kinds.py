"""`investigate` with no flag on five bundles, one per kind of change (#48): outputs changed by JAX's lowering, bits
changed by the compiler (within the tolerance), a slowdown, a speedup (never a regression: the bits are what
changed), and nothing; and a sixth, a speedup alone (nothing regressed). For each, in one run, as the CLI runs it (subprocesses, --json, a fresh store in a temp
folder):

1. `pack` the program;
2. `replay NAME --jax GOOD --jax BAD` with default settings (`--retrace` where the bundle's change is one the user
   sees when the program is traced again, as the user would replay it): the unit the time is compared with;
3. `investigate NAME --good GOOD --bad BAD --json`, no flag: the kind it chose and its first bad release, printed
   beside the truth, its time beside the replay's, and when the headline's issue body was written (#64:
   `report_written_s`, the body before any further change is searched). Where it refuses (exit 1), what it says is
   the answer: "nothing regressed by time", "not distinguishable" or "no change stood" is the answer "nothing".

The truths were checked on these releases (the programs' docstrings say why); every release of each window is in
the cache here (0.4.32 is yanked), so nothing is installed. A kind answered wrong is printed as such, with the
answer's own lines.

With `--load N` (#57), each bundle's `investigate` runs a second time, on a copy of its store as it was right after
`pack`, beside N CPU-bound processes (a Python busy loop each, started here and ended by their ids when it
ends): its wall against the same investigation run alone. The goals (#64): alone, the headline's body within 2x
the replay for every kind, the whole investigation within 2x where the answer is one measurement and within 3x for
a slowdown; under the load, at most 3x alone.

Usage: cd benchmarks && ../.venv/bin/python bench_kinds.py [--only NAME ...] [--load N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench_bisect import ROOT, run_status
from bench_investigate import run


@dataclass(frozen=True)
class Case:
    name: str
    program: str  # relative to the repository root
    good: str
    bad: str
    truth_kind: str  # outputs, bits, time, or "nothing"
    truth_first_bad: str | None
    retrace: bool  # the replay as a user would run it: retraced where the change is one of tracing
    story: str


CASES = [
    Case("rng", "tests/programs/retrace/rng.py", "0.4.38", "0.5.1", "outputs", "0.5.0", True,
         "outputs by lowering: jax_threefry_partitionable on by default from 0.5.0"),
    Case("colsum", "tests/programs/retrace/colsum.py", "0.4.38", "0.5.1", "bits", "0.5.1", False,
         "bits within the tolerance: jaxlib 0.5.1's column sum (the same StableHLO)"),
    Case("train-loop", "examples/train_loop.py", "0.4.30", "0.4.35", "time", "0.4.33", False,
         "slowdown: the CPU thunk runtime on by default from jaxlib 0.4.33"),
    Case("faster-later", "tests/programs/retrace/faster_later.py", "0.4.38", "0.5.1", "bits", "0.5.1", True,
         "speedup from 0.5.1 retraced (~10x), never a regression; its bits change at 0.5.1"),
    Case("colsum-same", "tests/programs/retrace/colsum.py", "0.4.30", "0.4.31", "nothing", None, False,
         "nothing: 0.4.30 and 0.4.31 agree bit for bit, in the same time"),
    # a sixth: only a speedup (0.5.0 runs this column sum in about half 0.4.38's time, the same bits): nothing
    # regressed, the answer a user should get
    Case("colsum-faster", "tests/programs/retrace/colsum.py", "0.4.38", "0.5.0", "nothing", None, False,
         "only a speedup: 0.5.0 about 2x faster than 0.4.38, the same bits"),
]

SET_ASIDE = re.compile(r"no regression: (\w+) \((\w+)\): (?:jax \S+ is ([\d.]+x))?")
# investigate's refusals, by what they say: nothing regressed (a speedup, the same time, no change that stood), or
# a change not yet told apart
REFUSALS = [("nothing", ("nothing regressed", "not distinguishable", "no change stood between the endpoints")),
            ("unsettled", ("not told apart yet",))]
NOT_OK = 9  # the exit code of a replay that was not ok (docs/errors.md)
HEADLINE = re.compile(r"first bad release (\S+) \(last good \S+; by (\w+)[^,;]*, (\w+)\)")


def answered(case: Case, env: dict[str, str]) -> tuple[float, str, str | None, str, float | None]:
    """(wall s, chosen kind, first bad, the answer's own lines, s to the headline's body) of `investigate` with no
    flag; "nothing" where it refused because no change stood between the endpoints, "failed" where it failed
    otherwise (neither writes a body)."""
    args = ["investigate", case.name, "--good", case.good, "--bad", case.bad, "--issue",
            str(Path(env["REPROBUNDLE_STORE"]).parent / f"{case.name}-issue.md"), "--json"]
    wall, done = run_status(args, env)
    if done.returncode != 0:
        said = done.stderr.strip()[-1500:]
        return wall, next((k for k, words in REFUSALS if any(w in said for w in words)), "failed"), None, said, None
    data = json.loads(done.stdout)
    bisect = next((s for s in data["steps"] if s["name"] == "bisect"), None)
    lines = [f"{s['name']}: {s['status']} in {s['spent_s']:.1f} s: {s['answer']}" for s in data["steps"]]
    found = HEADLINE.search(bisect["answer"]) if bisect else None
    kind = f"{found.group(2)} ({found.group(3)})" if found else "?"
    aside = [f"{k} ({m}){' ' + x if x else ''}" for k, m, x in SET_ASIDE.findall(bisect["answer"] if bisect else "")]
    if aside:
        kind += "; set aside: " + ", ".join(aside)
    return (wall, kind, data.get("first_bad"), "\n".join([f"chosen: {data.get('chosen')}", *lines]),
            data.get("report_written_s"))


def replay_headline(data: dict) -> str:
    heads = (data.get("comparison") or {}).get("headlines") or []
    return "; ".join(h["text"] for h in heads if h.get("comparable")) or "(no verdict)"


@contextlib.contextmanager
def cpu_load(n: int):
    """N CPU-bound processes while the block runs, ended by their ids after it."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in busy:
            p.terminate()
            p.wait()


def measure(case: Case, scratch: Path, load: int = 0) -> dict:
    env = {**os.environ, "REPROBUNDLE_STORE": str(scratch / case.name / "store")}
    run(["pack", str(ROOT / case.program), "--name", case.name, "--no-dump", "--no-profile"], env)
    loaded_env = {**env, "REPROBUNDLE_STORE": str(scratch / case.name / "store-loaded")}
    shutil.copytree(env["REPROBUNDLE_STORE"], loaded_env["REPROBUNDLE_STORE"])  # as it was after pack
    replay_s, done = run_status(["replay", case.name, "--jax", case.good, "--jax", case.bad,
                                 *(["--retrace"] if case.retrace else []), "--json"], env)
    if done.returncode not in (0, NOT_OK):  # NOT_OK: a replay whose outputs differ is a replay all the same
        raise SystemExit(f"replay of {case.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    replayed = json.loads(done.stdout)
    inv_s, kind, first_bad, said, report_s = answered(case, env)
    correct = kind.split()[0] == case.truth_kind and first_bad == case.truth_first_bad
    out = {"case": case, "replay_s": replay_s, "replay": replay_headline(replayed), "inv_s": inv_s, "kind": kind,
           "first_bad": first_bad, "correct": correct, "said": said, "report_s": report_s}
    if load:
        before = os.getloadavg()[0]
        with cpu_load(load):
            loaded_s, loaded_kind, loaded_bad, loaded_said, _ = answered(case, loaded_env)
        out.update(loaded_s=loaded_s, loaded_kind=loaded_kind, loaded_said=loaded_said,
                   loaded_correct=loaded_kind.split()[0] == case.truth_kind and loaded_bad == case.truth_first_bad,
                   loads=(before, os.getloadavg()[0]))
    return out


def chosen_text(r: dict) -> str:
    """The answer's kind and first bad release, then what it set aside as no regression."""
    kind, _, aside = r["kind"].partition("; ")
    return (f"{kind} at {r['first_bad']}" if r["first_bad"] else kind) + (f"; {aside}" if aside else "")


def table(rows: list[dict]) -> str:
    loaded = any("loaded_s" in r for r in rows)
    out = ["| bundle (window) | truth | chosen (answer) | correct? | investigate | replay | ratio | report (ratio) |"
           + (" under load (correct?) | / alone | load avg |" if loaded else ""),
           "| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- | --- |" if loaded else "")]
    for r in rows:
        c = r["case"]
        truth = f"{c.truth_kind} at {c.truth_first_bad}" if c.truth_first_bad else c.truth_kind
        line = (f"| `{c.name}` ({c.good} -> {c.bad}{', retraced replay' if c.retrace else ''}) | {truth} | "
                f"{chosen_text(r)} | {'yes' if r['correct'] else '**no**'} | {r['inv_s']:.1f} s | "
                f"{r['replay_s']:.1f} s | {r['inv_s'] / r['replay_s']:.2f}x | {report_text(r)} |")
        if "loaded_s" in r:
            line += (f" {r['loaded_s']:.1f} s ({'yes' if r['loaded_correct'] else '**no**'}) | "
                     f"{r['loaded_s'] / r['inv_s']:.2f}x | {r['loads'][0]:.1f} -> {r['loads'][1]:.1f} |")
        out.append(line)
    return "\n".join(out)


def report_text(r: dict) -> str:
    """When the headline's body was written, and that against the replay; "-" where no body was written."""
    if r["report_s"] is None:
        return "-"
    return f"{r['report_s']:.1f} s ({r['report_s'] / r['replay_s']:.2f}x)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="only these bundles (by name)")
    parser.add_argument("--load", type=int, default=0, help="also investigate beside N CPU-bound processes")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-kinds-"))
    rows = []
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        print(f"== {case.name}: {case.story}; load {os.getloadavg()[0]:.1f}", flush=True)
        rows.append(measure(case, scratch, args.load))
        r = rows[-1]
        print(f"replay ({r['replay_s']:.1f} s): {r['replay']}\ninvestigate ({r['inv_s']:.1f} s): {chosen_text(r)}, "
              f"{'correct' if r['correct'] else 'WRONG'}\n{r['said']}\n", flush=True)
        if "loaded_s" in r:
            print(f"beside {args.load} busy processes ({r['loaded_s']:.1f} s, load {r['loads'][0]:.1f} -> "
                  f"{r['loads'][1]:.1f}): {r['loaded_kind']}\n{r['loaded_said']}\n", flush=True)
    print(table(rows))
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
