"""What goes into a bug report of a bundle (`reprobundle issue`), as plain data: the title, what the stored runs
showed, the environment the bundle recorded (what `jax.print_environment_info()` prints), the reproducer script
when it fits in an issue (else the command that makes it), the HLO and `run_hlo_module` line for XLA's tracker, and
the Reproduce block. render/issue.py lays it out as Markdown. Nothing runs: only the bundle and its stored runs
are read.

The report is of one stored replay (a `group` of runs): by default the latest one that timed two releases or more
together, else the latest one; `run_id` picks the replay holding that run. From it come the measurement (each
release's median against the baseline's, the oldest release: paired verdict, ratio and 95% interval, rounds and the
machine's conditions, as `replay` computed them: analysis/verdict.py) and the environment of each compared release
as its run recorded it; the packing machine's environment is shown apart.

The latest bisection stored beside the runs (investigate/answers.py) gives the first bad release, the layer and
the source lines whose lowering changed, in the title where they fit and in a section of their own; without one
that found a boundary, a stored commit bisection's ends (the good release, JAX at the first bad commit) do, as its
reproducer (investigate/report/script_plan.commit_plan) judged them. The tracker
defaults to XLA for a piece minimize reduced (the frozen module shows the difference: the compiler's), else to JAX.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ...bundle.frozen_script import (
    NoScriptError,
    ScriptTooLargeError,
    difference,
    every_run,
    file_stem,
    hlo_texts,
    run_hlo_module_line,
    source_lines,
    stored_runs,
)
from ...bundle.program_script import (
    change_lines,
    program_files,
    program_of,
    run_outputs,
    ulps_text,
    value_changes,
)
from ...bundle.registry import Bundle, Registry, open_ref
from ...bundle.sharing import reproduce_info, store_args
from ...errors import ReproBundleError, UsageError
from ...run.contenders import concrete_versions, variant_args
from ...text import clean
from ..answers import COMMIT_BISECTION
from .change_rows import (
    a_map,
    change_rows,
    changed_function,
    commit_bisection_of,
    explanation_of,
    measured_layer,
)
from .newest import newest_verdict, timed_text
from .script_plan import (
    Plan,
    answered_replays,
    change_plans,
    minimized_piece,
    needs_changes_script,
    plan,
    pythons_needed,
    replays_of,
    reproduced_changes,
    script_and_plan,
    script_of,
    stored_answers,
    window_changes,
)

TRACKERS = {"jax": "https://github.com/jax-ml/jax/issues/new", "xla": "https://github.com/openxla/xla/issues/new"}
BODY_LIMIT = 65_000  # characters: GitHub refuses an issue body over 65,536
ENVIRONMENT_KEYS = (("jax", "jax"), ("jaxlib", "jaxlib"), ("numpy", "numpy"), ("ml_dtypes", "ml_dtypes"),
                    ("Python", "python_full"), ("OS", "os"), ("machine", "machine"), ("backend", "backend"),
                    ("CPU", "cpu_model"), ("CPU count", "cpu_count"))


def environment_rows(env: Any) -> list[tuple[str, str]]:
    """(name, value) of what `jax.print_environment_info()` prints, as a bundle or a run recorded it (free-form
    data)."""
    env = env if isinstance(env, dict) else {}
    rows = [(name, str(env[key])) for name, key in ENVIRONMENT_KEYS if env.get(key) not in (None, "")]
    devices = env.get("devices")
    if isinstance(devices, list) and devices:
        kinds = sorted({str(d.get("kind") or d.get("platform")) for d in devices if isinstance(d, dict)})
        rows.append(("devices", f"{len(devices)} x {', '.join(kinds)}"))
    accelerator = env.get("accelerator")
    packages = accelerator.get("packages") if isinstance(accelerator, dict) else None
    if isinstance(packages, dict):  # libtpu, the CUDA plugin
        rows += [(str(name), str(version)) for name, version in sorted(packages.items())]
    env_vars = env.get("env_vars") if isinstance(env.get("env_vars"), dict) else {}
    rows.append(("XLA_FLAGS", str(env_vars.get("XLA_FLAGS") or "(not set)")))
    if env_vars.get("LIBTPU_INIT_ARGS"):
        rows.append(("LIBTPU_INIT_ARGS", str(env_vars["LIBTPU_INIT_ARGS"]).strip()))
    return rows


TIMED = ("ok", "mismatch")


def _timed(run: dict) -> bool:
    return run.get("status") in TIMED and bool((run.get("timing") or {}).get("samples_ns"))


def chosen_replay(runs: list[dict], run_id: str | None, bisection: dict | None = None) -> tuple[list[dict], dict]:
    """The runs of the replay the issue reports, and how it was chosen: the one holding `run_id` (its full id or a
    unique prefix), else the latest that ran the first bad release of the stored bisection (`bisection`) among the
    runs its answer rests on, else the latest that timed two runs or more together, else the latest."""
    replays = replays_of(runs)
    together = [g for g in replays if sum(map(_timed, g)) >= 2]
    answered = answered_replays(replays, bisection)
    if run_id is not None:
        chosen, how = _replay_of_run(replays, runs, run_id), "chosen with --run"
    elif answered:
        chosen, how = answered[-1], "the stored bisection's probe of its first bad release"
    elif together:
        chosen, how = together[-1], "the latest of the bundle's stored replays that timed releases together"
    else:
        chosen, how = (replays[-1] if replays else []), "the latest stored run (no replay timed releases together)"
    return chosen, {"how": how, "runs": [_run_ref(r) for r in chosen], "replays": len(replays),
                    "together": len(together), "group": (chosen[0].get("group") if chosen else None)}


def _replay_of_run(replays: list[list[dict]], runs: list[dict], run_id: str) -> list[dict]:
    """The one replay holding the run `run_id` names (its full id or a unique prefix), else a UsageError."""
    hits = [g for g in replays if any(str(r.get("run_id", "")).startswith(run_id) for r in g)]
    if len(hits) != 1:
        known = ", ".join(str(r.get("run_id")) for r in runs[-6:]) or "none stored"
        raise UsageError(f"{'no' if not hits else 'more than one'} stored run of this bundle matches "
                         f"--run {clean(run_id, 60)!r}", hint=f"pass one of its runs' ids (latest: {known})")
    return hits[0]


def _run_ref(run: dict) -> dict:
    return {"run_id": str(run.get("run_id") or ""), "label": _label(run), "status": str(run.get("status")),
            "created": str(run.get("created") or "")}


def _label(run: dict) -> str:
    """The release a run ran, as the history names its column (installed: the JAX it was)."""
    from ...analysis.history import column_of

    return column_of(run)


def measurement(runs: list[dict], last_good: str | None = None) -> dict | None:
    """The replay's times (analysis/slowdown.measured_times) with the last good release as the baseline where the
    replay timed it (the stored answer's), else the oldest release, each row with its run's status, backend and
    machine conditions; None with fewer than two runs timed together. The candidate shown in the title is the one
    furthest from the baseline (a settled verdict first)."""
    from ...analysis.history import order_columns
    from ...analysis.slowdown import measured_times

    timed = [r for r in runs if _timed(r)]
    order = order_columns([_label(r) for r in timed])
    first = [r for r in timed if _label(r) == last_good][:1]
    times = measured_times(first + sorted((r for r in timed if r not in first), key=lambda r: order.index(_label(r))))
    if times is None:
        return None
    by_id = {str(r.get("run_id") or ""): r for r in timed}
    rows = [_with_run(row, by_id[row["run_id"]], k == 0) for k, row in enumerate(times["rows"])]
    shown = max(rows[1:], key=lambda r: (bool(r["settled"]) and r["verdict"] in ("slower", "faster"),
                                         abs(math.log(r["ratio"])) if r["ratio"] and r["ratio"] > 0 else 0.0))
    return {"baseline": rows[0], "rows": rows, "shown": shown}


def _with_run(row: dict, run: dict, baseline: bool) -> dict:
    """A measured row with its run's label, backend and machine conditions."""
    from ...analysis.busy import summary

    env: Any = run.get("environment") or {}
    cond = env.get("conditions") if isinstance(env.get("conditions"), dict) else None
    return dict(row, label=_label(run), baseline=baseline, backend=str(env.get("backend") or "backend not recorded"),
                conditions=summary(cond) if cond else None)


def run_environments(runs: list[dict]) -> list[dict]:
    """Each compared run's environment as it recorded it (the release, its run id, the rows)."""
    return [{"label": _label(r), "run_id": str(r.get("run_id") or ""), "rows": environment_rows(r.get("environment"))}
            for r in runs if isinstance(r.get("environment"), dict)]


def program_source(registry: Registry, bundle: Bundle) -> dict | None:
    """The program the bundle carries (pack SCRIPT.py:FACTORY): its factory and the script's text; for a piece
    minimize reduced, the lines the kept ops came from. None when it carries neither."""
    program: Any = bundle.manifest["function"].get("program") or {}
    text = None
    for f in program.get("files", [])[:20]:
        if f.get("path") == program.get("script") and f["blob"]["size"] < SOURCE_LIMIT:
            try:
                text = registry.get_blob(f["blob"]).decode("utf-8", "replace")
            except ReproBundleError:  # a blob that is missing only loses the source from the report
                text = None
    lines = source_lines(registry, bundle)
    if text is None and not lines:
        return None
    return {"script": str(program.get("script") or ""), "factory": str(program.get("factory") or ""),
            "text": text, "kept_ops": lines}


SOURCE_LIMIT = 16_000  # bytes: a longer script is left to the bundle (the issue body has 65 KB in all)


def title(bundle: Bundle, diff, measured: dict | None = None, bisection: dict | None = None,
          changes: list[dict] | None = None, named: str | None = None) -> str:
    """One line: what broke, where and how much. From a stored bisection that found a boundary: the function, what
    changed (the outputs: how many elements of which output, `changes`; an error; the time: the measured ratio
    against the last good release), from which release, the last good one and the layer. Else the backend, what
    the piece is, what it does, under which setting, on which jax; a replay that timed releases together and whose
    outputs all matched is titled by its measured difference."""
    said = headline(bundle, bisection, measured, changes or [], named)
    if said:
        return said
    base = _title(bundle, diff, measured)
    if bisection is None:
        return base
    answer = bisection["answer"]
    layer = (answer.get("layer") or {}).get("layer")
    said = f"; first bad release {answer['first_bad']}" + (f" ({layer})" if layer in ("compiler", "lowering") else "")
    return clean(base + said, 200) if len(base) + len(said) <= 200 else base


LAYER_WORDS = {"lowering": "JAX's lowering", "compiler": "the compiler", "both": "JAX's lowering and the compiler"}


def headline(bundle: Bundle, bisection: dict | None, measured: dict | None, changes: list[dict],
             named: str | None = None) -> str | None:
    """The title of a bisection's answer (None where it found no boundary): stable for one stored answer, since
    it reads only the answer and the stored runs. Its subject is the JAX function whose lowering changed (`named`)
    where it did, else the bundle's; its kind the headline's own (a slowdown says slower)."""
    a = (bisection or {}).get("answer") or {}
    good, bad = a.get("last_good"), a.get("first_bad")
    if not good or not bad or good == bad:
        return None
    subject = f"`{named}`" if named else _subject(bundle.manifest)
    measured_as = measured_layer(a_map(a.get("layer")), str(a.get("criterion")), str(a.get("mode") or "frozen"))
    layer = LAYER_WORDS.get(str(measured_as.get("layer")))
    if a.get("criterion") == "time":
        return _time_title(subject, a, measured, layer)
    what, detail = _change_phrase(changes, str(a.get("criterion") or ""))
    where = f"; {layer}" if layer else ""
    if a.get("commit"):  # a commit window's: the first bad commit, not the version its JAX calls itself
        said = f"{subject} {what} from JAX commit {str(a['commit'])[:10]} (last good jax {good}{where})"
    else:
        said = f"{subject} {what} from jax {bad} (last good {good}{where})"
    return clean(said + (detail if len(said + detail) <= 200 else ""), 200)  # the detail whole, or none


def _time_title(subject: str, a: dict, measured: dict | None, layer: str | None) -> str:
    """A slowdown's title: the reported replay's settled ratio, else its confirmation's; never "other outputs"."""
    good, bad = str(a.get("last_good")), str(a.get("first_bad"))
    slower = _slower_title(subject, measured, good, f"; {layer}" if layer else "") if measured else None
    return slower or clean(f"{subject} {_confirmed_slower(a)} from jax {bad} (last good {good}"
                           f"{'; ' + layer if layer else ''})", 200)


def _confirmed_slower(a: dict) -> str:
    """`1.52x slower` as the slowdown's confirmation measured it, else `slower`."""
    ratio = a_map(a.get("confirmation")).get("ratio")
    return f"{ratio:.2f}x slower" if isinstance(ratio, (int, float)) and ratio > 0 else "slower"


def _slower_title(subject: str, measured: dict, good: str, where: str) -> str | None:
    """`fn` 3.70x slower on jax 0.4.33 than 0.4.31 (CPU): a settled slowdown against the last good release."""
    row, base = measured["shown"], measured["baseline"]
    if row["ratio"] and row["settled"] and row["verdict"] == "slower" and base["label"] == good:
        return clean(f"{subject} {row['ratio']:.2f}x slower on jax {row['label']} than {good} "
                     f"({row['backend'].upper()}{where})", 200)
    return None


def _change_phrase(changes: list[dict], criterion: str) -> tuple[str, str]:
    """(what changed, how much: `: 64 of 64 elements of output 0 (float32[64]) differ` or '')."""
    if criterion == "error":
        return "fails", ""
    first = next((c for c in changes if "count" in c), None)
    if first is not None and criterion == "bits" and all(c.get("beyond") == 0 for c in changes if "count" in c):
        return ("changes its last bits, within the tolerance,",
                f": {first['count']} of {first['size']} elements of output {first['output']} "
                f"({first['dtype']}{first['shape']}) differ{ulps_text(first).replace(',', ' by', 1)}")
    if first is not None:
        return (f"gives other {'bits' if criterion == 'bits' else 'values'}",
                f": {first['count']} of {first['size']} elements of output {first['output']} "
                f"({first['dtype']}{first['shape']}) differ")
    shape = next((c for c in changes if "got_kind" in c), None)
    if shape is not None:
        return f"gives {shape['got_kind']} where it gave {shape['expected_kind']}", ""
    return ("gives other output bits" if criterion == "bits" else "gives other outputs"), ""


def ratio_text(row: dict) -> str:
    """A measured ratio and its 95% interval, one format for the whole report: `3.70x [3.52-3.90]`; fewer rounds
    than make a figure say so instead (newest.timed_text, the one definition)."""
    return timed_text(row)


def _title(bundle: Bundle, diff, measured: dict | None) -> str:
    m = bundle.manifest
    env: Any = m.get("environment") or {}
    subject = _subject(m)
    setting = " with " + " ".join(f"{k}={v}" for k, v in diff.show.items()) if diff.show else ""
    prop = str((m.get("labels") or {}).get("minimized-property") or "")
    if measured is not None and set(diff.statuses) <= {"ok"} and (not prop or diff.expect == "slower"):
        return clean(f"{subject} {timing_phrase(measured)}{setting}", 160)
    what = _what(diff, bool(prop))
    releases = list(dict.fromkeys(diff.releases))
    jax = f"jax {releases[-1]} vs {releases[0]}" if len(releases) >= 2 else \
        f"jax {env['jax']}" if env.get("jax") else "the packing jax not recorded"
    backend = f"[{env['backend']}] " if env.get("backend") else ""
    return clean(f"{backend}{subject} {what}{setting} ({jax})", 160)


def _subject(manifest: dict) -> str:
    """What the bundle is: the ops minimize kept, else the function's name."""
    labels = manifest.get("labels") or {}
    ops = [part.split(" (")[0] for part in str(labels.get("minimized-ops") or "").split("; ") if part]
    return (f"{len(ops)} ops ({', '.join(ops[:4])})" if ops
            else f"`{manifest['function'].get('fields', {}).get('fun_name', 'function')}`")


def verdict_words(row: dict) -> str:
    """A paired verdict in words, one text wherever the report prints it: slower, faster or the same where it
    settled, else `not settled` (never "same" of a verdict that did not settle)."""
    return str(row["verdict"]) if row.get("settled") else "not settled"


def timing_phrase(measured: dict) -> str:
    """`30.1x slower on jax 0.4.33 than 0.4.31 (CPU)`: the verdict only where it settled, else the ratio."""
    row, base = measured["shown"], measured["baseline"]
    ratio, where = row["ratio"], f"(jax {row['label']} vs {base['label']}, {row['backend'].upper()})"
    if ratio is None:
        return f"timed with no ratio {where}"
    if row["settled"] and row["verdict"] == "slower":
        return f"{ratio_text(row)} slower on jax {row['label']} than {base['label']} ({row['backend'].upper()})"
    if row["settled"] and row["verdict"] == "faster":
        return f"{ratio_text(row)} the time on jax {row['label']} than {base['label']} ({row['backend'].upper()}): faster"
    if row["settled"] and row["verdict"] == "same":
        return f"takes the same time {where}: {ratio_text(row)}, no difference"
    return f"takes {ratio_text(row)} the time {where}, not settled"


def _what(diff, minimized: bool) -> str:
    """What the title says the bundle does: what minimize kept it for, else what its stored runs showed."""
    if not minimized:
        if not diff.statuses:
            return "(no replay of it stored yet: nothing seen to report)"
        if "mismatch" not in diff.statuses and not set(diff.statuses) & {"error", "crashed", "timeout"}:
            return "replays with outputs within tolerance"
    if diff.expect == "outputs" and diff.bits:
        return "gives other output bits"
    return {"outputs": "gives outputs beyond float tolerance", "error": "fails to compile or run",
            "slower": "runs slower"}.get(diff.expect, "behaves differently")


def _script(registry: Registry, bundle: Bundle, ref: str, stem: str, runs: list[dict],
            bisection: dict | None) -> dict:
    """The reproducer the report offers, the first that exists of: the script, inline where it fits in an issue
    (with the times of the reported replay, `runs`; the one `bisection`, the stored answer read already, calls
    for); else the minimized piece's script (minimize's NAME-min of this bundle); else the bundle's zip, which
    replays itself (`python NAME.zip`; its name is the Reproduce block's, set by issue_data). `kind` script, piece or
    zip; `why`: why not the one before; `plan`: the plan the script was written by (reproducer.script_and_plan)."""
    store = " ".join(shlex.quote(a) for a in store_args(registry))
    command = f"reprobundle script {shlex.quote(ref)} -o {stem}.py" + (f" {store}" if store else "")
    plans = change_plans(registry, bundle, bisection, window_changes(bisection)) \
        if bisection is not None and bisection.get("kind") != COMMIT_BISECTION else []
    several = reproduced_changes(registry, bundle, plans) if needs_changes_script(plans) else None
    try:
        text, used = script_and_plan(registry, bundle, f"{stem}.py", runs, answer=bisection)
    except (ScriptTooLargeError, NoScriptError) as e:
        if several is not None:  # minimize's piece shows the headline alone: the zip checks every change
            return {"kind": "zip", "text": None, "name": f"{stem}.py", "command": None, "plan": None,
                    "why": f"{e.message}; {e.hint}", "changes": several}
        return _piece_or_zip(registry, bundle, stem, f"{e.message}; {e.hint}", store)
    return {"kind": "script", "text": text, "name": f"{stem}.py", "command": command, "bytes": len(text.encode()),
            "why": None, "plan": used, "changes": several}


def _piece_or_zip(registry: Registry, bundle: Bundle, stem: str, why: str, store: str) -> dict:
    """The minimized piece's script where minimize stored one and it fits, else the zip (named by issue_data)."""
    piece = minimized_piece(registry, bundle)
    if piece is not None:
        name = f"{file_stem(piece)}.py"
        try:
            text = script_of(registry, piece, name)
        except (ScriptTooLargeError, NoScriptError) as e:
            why += f"; the minimized piece {piece.ref}: {e.message}"
        else:
            labels = piece.manifest.get("labels") or {}
            sides = [c.strip() for c in str(labels.get("minimized-contenders") or "").split(" vs ")]
            command = f"reprobundle script {shlex.quote(str(piece.ref))} -o {name}" + (f" {store}" if store else "")
            return {"kind": "piece", "text": text, "name": name, "command": command, "bytes": len(text.encode()),
                    "why": why, "piece": str(piece.ref), "description": str(piece.manifest.get("description") or ""),
                    "property": str(labels.get("minimized-property") or ""),
                    "show": difference(piece, stored_runs(registry, piece)).show,
                    "sides": sides if len(sides) == 2 else None, "plan": None}
    return {"kind": "zip", "text": None, "name": f"{stem}.py", "command": None, "why": why, "plan": None}


def _reproduce(registry: Registry, bundle: Bundle, runs: list[dict]) -> dict:
    """The Reproduce block: the stored replay's versions and variants, else the JAX the bundle was packed with."""
    versions = concrete_versions(runs) if runs else []
    extra = variant_args(runs, concrete_versions) if runs else []
    if not versions and not extra:
        versions = [str((bundle.manifest.get("environment") or {}).get("jax") or "installed")]
    return reproduce_info(registry, bundle, versions, extra_args=extra, context="snippet")


def issue_data(ref: str, *, store: str | None = None, tracker: str | None = None, run_id: str | None = None,
               attach: str | Path | None = None, jax_repo: str | None = None, answer_id: str | None = None) -> dict:
    """The issue of `ref` as plain data (render/issue.py makes the Markdown); `tracker` jax or xla, else chosen;
    `run_id`: report the stored replay that holds this run (default: the stored bisection's probe of its first bad
    release, else the latest that timed releases together);
    `attach`: a folder to write the bundle's zip into, so that the body may say it is attached; `jax_repo`: a JAX
    git repository (folder or URL) whose release notes say whether a changed default was intended
    (investigate/release_notes.py; default: a clone in the cache, else none); `answer_id`: the stored bisection to
    report (an investigation's own answer), else the latest stored one."""
    if tracker not in (None, *TRACKERS):
        raise UsageError(f"unknown tracker {clean(tracker, 40)!r}", hint="--tracker jax or --tracker xla")
    registry, bundle = open_ref(ref, store)
    answers = stored_answers(registry, bundle)
    bisection, commits = reported_answer(answers, answer_id)
    explanation = _explanation_of(answers, bisection)
    stored = every_run(registry, bundle)  # read once: the replay reported and the newest release's come from it
    answer = commits if boundary(bisection) is None and commits else bisection  # what the reproducers are of
    runs, replay = chosen_replay(stored, run_id, answer)
    diff = difference(bundle, runs)
    labels = bundle.manifest.get("labels") or {}
    chosen = tracker or ("xla" if labels.get("minimized-from") else "jax")
    stem = file_stem(bundle)
    script = _script(registry, bundle, ref, stem, runs, answer)  # a commit window's own, never another window's
    found = judged(registry, bundle, runs, bisection, script.pop("plan"))
    measured = measurement(runs, found["good"] if found else None)
    newest = newest_verdict(registry, bisection, stored) if found else None
    heading = with_newest(title(bundle, diff, measured, _titled(bisection, found), found["changes"] if found else None,
                                named=_named(registry, bundle, bisection, commits)), newest)
    notes = intended(registry, bundle, explanation, bisection, jax_repo, commits)
    change = documented_change(bisection, commits, notes, jax_repo)
    heading = documented_title(heading, change)
    hlo = hlo_texts(registry, bundle)
    return {"bundle": str(bundle.ref), "bundle_id": bundle.ref.bundle_id, "tracker": chosen, "title": heading,
            "open_url": f"{TRACKERS[chosen]}?title={quote(heading, safe='')}",
            "description": str(bundle.manifest.get("description") or ""),
            "minimized_from": labels.get("minimized-from"), "expect": diff.expect, "show": diff.show,
            "seen": diff.seen, "replay": replay, "judged": found, "newest": newest,
            "documented": notes, "documented_change": change,
            "commit_bisection": commits, "layer": _headline_layer(bisection),
            "changes": change_rows(registry, bundle, bisection, answers, stored, jax_repo),
            "asked_again": asked_again_lines(ref, bisection, explanation),
            "bisection": bisection, "explanation": explanation, "measured": measured, "run_environments": run_environments(runs),
            "environment": environment_rows(bundle.manifest.get("environment")),
            "source": program_source(registry, bundle), "script": script,
            "hlo": {"before": hlo.get("before"), "after": hlo.get("after"), "folder": f"{stem}-hlo",
                    "command": run_hlo_module_line(bundle, diff, f"{stem}.{next(iter(hlo))}.hlo") if hlo else None,
                    "files_command": " ".join(["reprobundle", "script", shlex.quote(ref), "--hlo", f"{stem}-hlo",
                                               *(shlex.quote(a) for a in store_args(registry))])},
            "timing_phrase": timing_phrase(measured) if measured else None,
            "reproduce": (rep := _reproduce(registry, bundle, runs)), "body_limit": BODY_LIMIT,
            "attached": _attach(registry, bundle, rep, attach, answer)} | {"zip": str(rep.get("attach") or
                                                                                   f"{stem}.zip")}


def _headline_layer(bisection: dict | None) -> dict | None:
    """The headline change's layer as measured for it (change_rows.measured_layer), or None."""
    a = (bisection or {}).get("answer") or {}
    if not isinstance(a.get("layer"), dict):
        return None
    return measured_layer(a["layer"], str(a.get("criterion")), str(a.get("mode") or "frozen"))


def reported_answer(answers: list[dict], answer_id: str | None) -> tuple[dict | None, dict | None]:
    """(the release bisection, the commit bisection) a report is of: of the stored answer `answer_id` names (an
    investigation's own: a release bisection, with the commit bisection of its headline; or a commit window's,
    with no release bisection), else the latest stored bisection's; UsageError where `answer_id` names none."""
    from ..answers import BISECTION, COMMIT_BISECTION, latest_bisection

    if answer_id is None:
        bisection = latest_bisection(answers)
        return bisection, _commits_of(answers, bisection)
    found = [a for a in answers if a.get("kind") in (BISECTION, COMMIT_BISECTION) and a.get("answer_id") == answer_id]
    if not found:
        raise UsageError(f"no stored answer {clean(answer_id, 60)!r} of this bundle",
                         hint="`reprobundle show REF` lists its stored answers")
    if found[-1].get("kind") == COMMIT_BISECTION:
        return None, found[-1]
    return found[-1], _commits_of(answers, found[-1])


def _explanation_of(answers: list[dict], bisection: dict | None) -> dict | None:
    """The explanation of the headline change: its releases, by its criterion, in its mode (a window of several
    changes has one per change, and two changes at one release one each); without a bisection that found a
    boundary, the latest stored."""
    from ..answers import latest_explanation

    ends = boundary(bisection)
    if ends is None:
        return latest_explanation(answers)
    return explanation_of(answers, ends[0], ends[1], ends[2], ends[3])


def _commits_of(answers: list[dict], bisection: dict | None) -> dict | None:
    """The commit bisection of the headline change (its releases and kind: never the commit of another change at
    that release); without a bisection that found a boundary, the latest stored (a commit window)."""
    from ..answers import latest_commit_bisection

    a = (bisection or {}).get("answer") or {}
    if boundary(bisection) is None:
        return latest_commit_bisection(answers)
    layer = measured_layer(a_map(a.get("layer")), str(a.get("criterion")), str(a.get("mode") or "frozen"))
    return commit_bisection_of(answers, a, layer)


def _named(registry: Registry, bundle: Bundle, bisection: dict | None, commits: dict | None) -> str | None:
    """The JAX function whose lowering changed at the headline's boundary (change_table.changed_function); for a
    commit window without a release bisection that found one, at its first bad commit."""
    if boundary(bisection) is None and commits is not None:
        return changed_function(registry, bundle, {"lowering": _commit_window_notes(commits)[0]})
    a = (bisection or {}).get("answer") or {}
    layer = measured_layer(a_map(a.get("layer")), str(a.get("criterion")), str(a.get("mode") or "frozen"))
    return changed_function(registry, bundle, layer) if layer.get("layer") in ("lowering", "both") else None


def _titled(bisection: dict | None, found: dict | None) -> dict | None:
    """The answer the title is of: the release bisection's, else a commit window's ends as the reproducer judged
    them (the good release, the first bad commit: the title names it; JAX's lowering)."""
    if boundary(bisection) is not None or not found or not found.get("commit"):
        return bisection
    return {"answer": {"last_good": found["good"], "first_bad": found["bad"], "criterion": found["criterion"],
                       "layer": {"layer": "lowering"}, "commit": found["commit"]}}


def judged(registry: Registry, bundle: Bundle, runs: list[dict], bisection: dict | None,
           used: Plan | None = None) -> dict | None:
    """What the report says from a bisection that found a boundary, judged against its last good release (never
    the packing release): the values that changed between the stored runs of the last good and the first bad
    release (bundle/program_script.value_changes), each reported run against the last good release's outputs,
    and which reproducer the script is (`used`, the plan its script was written by, else investigate/report/script_plan.plan).
    Without a release bisection that found one, the stored commit bisection's ends where the reproducer comes from
    it (the good release, and the JAX of the first bad commit, else the commit: `commit` its hash). None without
    such an answer. `pythons`: the Python each release's uv line names (script_plan.pythons_needed)."""
    chosen = used or plan(registry, bundle, bisection)
    ends = boundary(bisection) or _commit_ends(chosen)
    if ends is None:
        return None
    good, bad, criterion, mode = ends
    mine = run_outputs(registry, chosen.good) if chosen.good else None
    changes = _expected_and_got(registry, chosen, mine) if criterion != "time" else []  # a slowdown has none
    same_mode = [r for r in runs if _mode_of(r) == mode] if mine else []
    return {"good": good, "bad": bad, "criterion": criterion, "mode": mode,
            "changes": changes, "change_lines": change_lines(changes, good, bad),
            "seen": [_judged_line(registry, r, mine or [], good, chosen.bits) for r in same_mode],
            "reproducer": chosen.kind, "reproducer_why": chosen.why, "has_program": program_of(bundle) is not None,
            "commit": chosen.commit, "pythons": pythons_needed([good] if chosen.commit else [good, bad]),
            "backend": str((bundle.manifest.get("environment") or {}).get("backend") or "")}


def _expected_and_got(registry: Registry, chosen: Plan, mine: list | None) -> list[dict]:
    """The values that changed between the plan's runs of the last good release (`mine`, its outputs) and the
    first bad one (bundle/program_script.value_changes); [] where either is missing."""
    return value_changes(mine, run_outputs(registry, chosen.bad), chosen.bits) if mine and chosen.bad else []


def _commit_ends(chosen: Plan) -> tuple[str, str, str, str] | None:
    """(the good release, the JAX version of the first bad commit's run (else the commit), criterion, "retrace")
    where the reproducer comes from a stored commit bisection (reproducer.commit_plan), else None."""
    if chosen.commit is None or chosen.labels is None:
        return None
    good, bad = chosen.labels
    return good, bad, str(((chosen.answer or {}).get("answer") or {}).get("criterion") or ""), "retrace"


def boundary(bisection: dict | None) -> tuple[str, str, str, str] | None:
    """(last good, first bad, criterion, mode) of a stored bisection that found a boundary, else None."""
    a = (bisection or {}).get("answer") or {}
    good, bad = str(a.get("last_good") or ""), str(a.get("first_bad") or "")
    if not good or not bad or good == bad:
        return None
    return good, bad, str(a.get("criterion") or ""), str(a.get("mode") or "frozen")


def _mode_of(run: dict) -> str:
    return str((run.get("contender") or {}).get("mode") or "frozen")


def _judged_line(registry: Registry, run: dict, good: list, release: str, bits: bool) -> str:
    """One reported run against the last good release's outputs."""
    label = _label(run)
    if run.get("status") not in TIMED or not run.get("outputs"):
        return f"jax {label}: {run.get('status')}" + (f": {clean(run.get('reason'), 200)}" if run.get("reason") else "")
    changes = value_changes(good, run_outputs(registry, run), bits)
    if not changes:
        return f"jax {label}: outputs as jax {release}'s (last good)"
    first = changes[0]
    what = (f"{first['count']} of {first['size']} elements of output {first['output']}" if "count" in first
            else f"{first['got_kind']} where it gave {first['expected_kind']}")
    return f"jax {label}: differs from jax {release} (last good): {what}"


def with_newest(heading: str, newest: dict | None) -> str:
    """The title with what the newest release says: `; still on jax 0.10.2`, `; gone on jax 0.10.2`."""
    if not newest or newest.get("still") is None:
        return heading
    said = f"; {'still on' if newest['still'] else 'gone on'} jax {newest['release']}"
    return clean(heading + said, 200) if len(heading) + len(said) <= 200 else heading


def documented_change(bisection: dict | None, commits: dict | None, notes: list[str],
                      jax_repo: str | None = None) -> dict | None:
    """The change as JAX documents it, what the title and the first line say: the CHANGELOG.md entry the first bad
    commit itself adds, with its workaround and where the notes of the release it shipped in carry it (the stored
    commit bisection's `notes`: commit_bisect.notes_of), where that bisection is of the window reported (the release
    bisection's last good and first bad releases; a commit window where no release bisection found a boundary, or
    from its last good release); else the first release-notes line that names the cause (`notes`, intended's):
    {"note", "release"}. None where neither is. A commit bisection stored before it kept its notes has them read
    from `jax_repo` (a local clone; else the cached one) where one is here."""
    a = (commits or {}).get("answer") or {}
    first = a.get("first_bad")
    sha = str(first.get("sha") or "") if isinstance(first, dict) else ""
    own = (a["notes"] if "notes" in a else _read_notes(a, sha, jax_repo)) if sha and _of_window(a, bisection) \
        else None  # an answer stored before it kept its notes: read now
    if isinstance(own, dict) and own.get("entry"):
        return {**own, "first_bad": sha}
    if not notes:
        return None
    m = re.match(r"documented in the (\S+) release notes", notes[0])
    return {"note": notes[0], "release": m[1] if m else None}


def _of_window(commits: dict, bisection: dict | None) -> bool:
    """Whether a commit bisection's answer is of the window reported: the release bisection's last good and first
    bad releases; a commit window where no release bisection found a boundary, or one from its last good release."""
    window = (bisection or {}).get("answer") or {}
    if isinstance(commits.get("bad_commit"), dict):
        return boundary(bisection) is None or window.get("last_good") == commits.get("good")
    return (commits.get("good"), commits.get("bad")) == (window.get("last_good"), window.get("first_bad"))


def _read_notes(answer: dict, sha: str, jax_repo: str | None) -> dict | None:
    """commit_bisect.notes_of for a stored commit bisection's first bad commit `sha`, read from a local clone."""
    from ...envs.jax_commit import JaxRepo, git_dir_of
    from ..release_notes import commit_notes, found_repo

    where = jax_repo if jax_repo and "://" not in jax_repo else found_repo()
    if not where or len(sha) != 40:
        return None
    try:
        repo = JaxRepo(git_dir_of(where, "--jax-repo", "a clone of JAX"), "")
        window = isinstance(answer.get("bad_commit"), dict)
        return commit_notes(repo, sha, None if window else str(answer.get("bad")), str(answer.get("bad")))
    except ReproBundleError:
        return None


def documented_title(heading: str, change: dict | None) -> str:
    """The title led by what JAX's notes say of the change: `documented change in 0.4.36: ...` (the release it
    shipped in), or `documented change in the coming release: ...` for a commit window."""
    if not change:
        return heading
    release = change.get("release")
    said = f"documented change in {release}: " if release else "documented change in the coming release: "
    return clean(said + heading, 250)


def intended(registry: Registry, bundle: Bundle, explanation: dict | None, bisection: dict | None,
             jax_repo: str | None, commits: dict | None = None) -> list[str]:
    """The release notes' entries that name the cause, at the release it changed in: the default explain found
    changed (`documented in the 0.5.0 release notes: ...`), else the functions the program calls on the lines whose
    lowering changed (`... (it names jax.scipy.special.gamma, called at gamma.py:8): ...`); for a commit window
    (`commits`, a stored commit bisection with no release bisection that found a boundary), the `## Unreleased`
    notes at its first bad commit, else at its bad end; [] where none does."""
    from ..release_notes import documented

    x = (explanation or {}).get("answer") or {}
    said = x.get("diagnosis")
    default = said.get("default") if isinstance(said, dict) else None
    if isinstance(default, dict) and default.get("name"):
        release = str(default.get("candidate") or x.get("candidate") or "").split(" ")[0]
        return documented(jax_repo, release, [str(default["name"])])
    if boundary(bisection) is None and commits is not None:
        return _named_on_changed_lines(registry, bundle, *_commit_window_notes(commits), jax_repo)
    a = (bisection or {}).get("answer") or {}
    layer = measured_layer(a_map(a.get("layer")), str(a.get("criterion")), str(a.get("mode") or "frozen"))
    if layer.get("layer") not in ("lowering", "both"):  # no lowering change measured for this change: none named
        return []
    return _named_on_changed_lines(registry, bundle, a_map(layer.get("lowering")), str(a.get("first_bad") or ""),
                                   [], jax_repo)


def _commit_window_notes(commits: dict) -> tuple[dict | None, str, list[str]]:
    """(its lowering against its parent's, no release, [the first bad commit, the bad end]) of a stored commit
    bisection: where its notes are read (release_notes.documented)."""
    a = commits.get("answer") or {}
    shas = [str(c["sha"]) for c in (a.get("first_bad"), a.get("bad_commit")) if isinstance(c, dict) and c.get("sha")]
    lowering = a.get("lowering")
    return (lowering if isinstance(lowering, dict) else None), "", shas if a.get("first_bad") else []


def _named_on_changed_lines(registry: Registry, bundle: Bundle, lowering: dict | None, release: str,
                            commits: list[str], jax_repo: str | None) -> list[str]:
    """The release notes' entries (of `release`, or the coming release's at `commits`) that name a function the
    program calls where its lowering changed (`lowering`: a lowering diff's {"changed", "text"})."""
    from ..release_notes import called_names, documented

    text = lowering.get("text") if isinstance(lowering, dict) and lowering.get("changed") else None
    program = program_of(bundle)
    if not isinstance(text, str) or program is None or not (release or commits):
        return []
    names = called_names(dict(program_files(registry, program)), text)
    where = f"they name {', '.join(names[:3])}, which the program calls where its lowering changed"
    return [_saying_where(note, where) for note in documented(jax_repo, release, names, commits)]


def _saying_where(note: str, where: str) -> str:
    """A release note's line with why it was quoted: `... release notes (WHERE): ...`, or for the coming release's
    `... (Unreleased, at commit X; WHERE): ...`."""
    if " release notes: " in note:
        return note.replace(" release notes: ", f" release notes ({where}): ", 1)
    return note.replace("): ", f"; {where}): ", 1)


def asked_again_lines(ref: str, bisection: dict | None, explanation: dict | None) -> list[str]:
    """The commands that ask the stored answers again, for the reporter's terminal (never the body), rebuilt from
    the records' fields and quoted (answers.asked_again): a record's own `command` text is a stranger's."""
    from ..answers import asked_again

    return [asked_again(record, ref) for record in (bisection, explanation) if record is not None]


def _attach(registry: Registry, bundle: Bundle, rep: dict, folder: str | Path | None,
            bisection: dict | None = None) -> str | None:
    """Write the bundle's zip, under the name the Reproduce block gives it, into `folder`; its path (None: none)."""
    if folder is None:
        return None
    target = Path(folder)
    if not target.is_dir():
        raise UsageError(f"--attach {clean(str(folder), 200)}: no such folder", hint="make it, or name a folder "
                         "that exists: the bundle's zip is written there")
    from .reproducer_zip import export_reproducer_zip

    return str(export_reproducer_zip(registry, bundle, target / str(rep.get("attach") or f"{file_stem(bundle)}.zip"),
                                     bisection))
