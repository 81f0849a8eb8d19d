"""Rendering: plain data (for --json) and human text for bundles, refs and runs. No I/O beyond string building."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..analysis.hardware import hardware_note, hardware_of, hardware_text
from ..bundle import trees
from ..bundle.model import run_label, run_notes
from ..bundle.registry import Bundle, BundleRef
from ..text import clean
from ..units import human_bytes, human_ns
from .table import grid

if TYPE_CHECKING:
    from ..analysis.timing_summary import TimingSummary


SHOWN_RUNS = 10  # `show` lists a bundle's latest runs
ANSWER_LIMIT = 4000  # a step's answer in investigate's text, whole (a stored record's strings stop there too)


def _t(value: object, limit: int | None = None) -> str:
    """A value from a bundle or run record as one line of terminal text (text.clean: controls escaped)."""
    return clean(value, limit)


def table(headers: list[str], rows: list[list[str]]) -> str:
    rows = [[_t(c) for c in row] for row in rows]  # cells come from bundles and runs: escaped, one line each
    return "\n".join(grid(headers, rows))


def ref_data(ref: BundleRef) -> dict:
    return {"name": ref.name, "version": ref.version, "bundle_id": ref.bundle_id, "url": ref.url,
            "store": ref.store_url}


def _input_bytes(m: dict) -> int:
    return sum(leaf["blob"]["size"] for leaf in m["inputs"]["leaves"] if "blob" in leaf)


def bundle_row(b: Bundle) -> dict:
    from ..analysis.timing_summary import TimingSummary

    m = b.manifest
    env = m["environment"]
    timing = TimingSummary.of(m["reference"]["timing"]["samples_ns"])
    return {"ref": str(b.ref), "bundle_id": b.ref.bundle_id, "created": m["created"], "jax": env.get("jax", "?"),
            "median_ns": timing.median_ns, "inputs_bytes": _input_bytes(m), "description": m["description"]}


def bundle_table(rows: list[dict]) -> str:
    return table(["BUNDLE", "ID", "CREATED", "JAX", "REF TIME", "INPUTS", "DESCRIPTION"],
                 [[r["ref"], r["bundle_id"][7:19], r["created"][:19], r["jax"], human_ns(r["median_ns"]),
                   human_bytes(r["inputs_bytes"]), r["description"][:40]] for r in rows])


def bundle_data(b: Bundle, runs: list[dict], answers: Sequence[tuple[dict, str | None]] = ()) -> dict:
    """`show --json`: each answer record with `foreign`, why it is not this store's own (null: it is)."""
    return {"ref": ref_data(b.ref), "manifest": b.manifest, "runs": [run_data(r) for r in runs],
            "answers": [{**a, "foreign": why} for a, why in answers]}


def answer_line(a: dict) -> str:
    """One stored answer (investigate/answers.py) as one line: when, what it answered, the layer."""
    ans = a.get("answer") or {}
    if a.get("kind") == "explanation":
        d = ans.get("diagnosis") or {}
        return _t(f"{str(a.get('created', ''))[:19]}  explanation {ans.get('candidate')} vs {ans.get('baseline')} "
                  f"(by {ans.get('by')}): {d.get('kind')}: {d.get('summary')}  [{a.get('answer_id')}]", 300)
    if a.get("kind") == "commit-bisection":
        from .commits import first_bad_line

        return _t(f"{str(a.get('created', ''))[:19]}  commit bisection {ans.get('good_tag')}..{ans.get('bad_tag')}: "
                  f"{first_bad_line(ans)}  [{a.get('answer_id')}]", 300)
    if a.get("kind") == "minimization":
        contenders = " vs ".join(str(c) for c in ans.get("contenders") or [])
        return _t(f"{str(a.get('created', ''))[:19]}  minimization {contenders} ({ans.get('property')}): "
                  f"{ans.get('ops_before')} -> {ans.get('ops_after')} ops as {ans.get('packed')}  "
                  f"[{a.get('answer_id')}]", 300)
    layer = (ans.get("layer") or {}).get("layer")
    return _t(f"{str(a.get('created', ''))[:19]}  bisection {ans.get('good')}..{ans.get('bad')}: first bad "
              f"{ans.get('first_bad')} (last good {ans.get('last_good')}; by {ans.get('criterion')}, "
              f"{'retraced' if ans.get('mode') == 'retrace' else 'frozen'})"
              + (f", layer: {layer}" if layer else "") + f"  [{a.get('answer_id')}]", 300)


def _program_lines(fn: dict) -> list[str]:
    """The program a retrace runs (manifest 3): script, factory, files, packages, files left out."""
    program = fn.get("program")
    traced = (fn.get("traced_by") or {}).get("jax")
    if not program:
        return [_t(f"  traced by:    jax {traced}; no program stored (cannot retrace)")] if traced else []
    files = program.get("files") or []
    size = sum(int(f["blob"]["size"]) for f in files)
    lines = [_t(f"  program:      {program['script']}:{program['factory']}, {len(files)} file"
                f"{'s' if len(files) != 1 else ''} ({human_bytes(size)})" + (f", traced by jax {traced}" if traced
                                                                           else ""))]
    lines += [_t(f"    {f['path']}  ({human_bytes(int(f['blob']['size']))})") for f in files[:trees.MAX_LINES]]
    if program.get("packages"):
        lines.append(_t("    packages: " + ", ".join(f"{k} {v}" for k, v in sorted(program["packages"].items()))))
    lines += [_t(f"    left out: {s['path']} ({s['reason']})") for s in program.get("skipped") or []]
    return lines


def describe_bundle(b: Bundle, runs: list[dict], answers: Sequence[tuple[dict, str | None]] = ()) -> str:
    """`show`: the bundle, its latest runs, and its answer records (Registry.answer_records): the store's own, then
    the foreign ones apart, each with why it is foreign."""
    from ..analysis.timing_summary import TimingSummary

    m = b.manifest
    env = m["environment"]
    fn = m["function"]
    timing = TimingSummary.of(m["reference"]["timing"]["samples_ns"])
    lines = [
        f"{b.ref}  {b.ref.bundle_id}",
        f"  url:          {b.ref.url}",
        f"  created:      {_t(m['created'])} by reprobundle {_t(m['tool']['version'])}",
    ]
    if m["description"]:
        lines.append(f"  description:  {_t(m['description'])}")
    if m["labels"]:
        lines.append("  labels:       " + ", ".join(f"{_t(k)}={_t(v)}" for k, v in sorted(m["labels"].items())))
    lines += [
        f"  function:     {_t(fn['fields']['fun_name'])} ({_t(fn['kind'])}, platforms "
        f"{_t(', '.join(fn['fields']['platforms']))}, calling convention {fn['fields']['calling_convention_version']})",
    ]
    inputs, outputs = trees.leaves_of(m, "inputs"), trees.leaves_of(m, "outputs")
    lines.append("  inputs:       " + _t(trees.summary(inputs, human_bytes)))
    lines += [_t(line) for line in trees.render(inputs, human_bytes)]
    lines += _static_lines(fn.get("static") or [])
    lines += _program_lines(fn)
    lines.append("  outputs:      " + _t(trees.summary(outputs, human_bytes)))
    lines += [_t(line) for line in trees.render(outputs, human_bytes)]
    lines += [
        f"  reference:    median {human_ns(timing.median_ns)} (IQR {human_ns(timing.iqr_ns)}, n={timing.n}) "
        f"via {_t(m['reference']['route'])}",
        _t(f"  environment:  jax {env.get('jax', '?')}, jaxlib {env.get('jaxlib', '?')}, python "
           f"{env.get('python', '?')}, {hardware_text(env)}" + _driver_text(env)),
        "  artifacts:    " + ", ".join(f"{_t(k)} ({human_bytes(v['blob']['size'])})"
                                       for k, v in sorted(m["artifacts"].items())),
    ]
    if runs:
        shown = runs[-SHOWN_RUNS:]
        lines.append(f"  runs:         {len(runs)}" + (f" (the latest {len(shown)}; `--json` lists all)"
                                                      if len(shown) < len(runs) else ""))
        lines += [_t(f"    {r['created'][:19]}  jax {run_label(r)}: {r['status']}") for r in shown]
    return "\n".join(lines + _answer_lines(answers))


def _answer_lines(answers: Sequence[tuple[dict, str | None]]) -> list[str]:
    own = [a for a, why in answers if why is None]
    foreign = [(a, why) for a, why in answers if why is not None]
    lines = [f"  answers:      {len(own)}"] if own else []
    lines += ["    " + answer_line(a) for a in own[-10:]]
    if foreign:
        lines.append(f"  foreign answers: {len(foreign)} (not this store's: shown, never reused or reported)")
    for a, why in foreign[-10:]:
        lines += ["    " + answer_line(a), _t(f"      foreign: {why}", 300)]
    return lines


def _static_lines(static: list[dict]) -> list[str]:
    if not static:
        return []
    lines = [f"  static:       {len(static)} value{'s' if len(static) != 1 else ''} baked into the export"]
    lines += [f"    {_t(v['path'])} = {_t(v['repr'], 60)}" for v in static[:trees.MAX_LINES]]
    if len(static) > trees.MAX_LINES:
        lines.append(f"    ... and {len(static) - trees.MAX_LINES} more (show --json lists them all)")
    return lines


def _driver_text(env: dict) -> str:
    accelerator = env.get("accelerator")
    if isinstance(accelerator, dict) and accelerator.get("driver"):
        return f", {accelerator.get('driver')} driver"
    return ""


def run_data(run: dict) -> dict:
    from ..analysis.timing_summary import TimingSummary

    timing = TimingSummary.of((run.get("timing") or {}).get("samples_ns") or [])
    return {"run_id": run["run_id"], "bundle": run["bundle"], "requested": run["requested"],
            "jax": run["environment"].get("jax"), "status": run["status"], "reason": run["reason"],
            "route": run.get("route"), "median_ns": timing.median_ns, "iqr_ns": timing.iqr_ns, "n": timing.n,
            "check": run.get("check"), "attempts": run.get("attempts", []), "contender": run.get("contender"),
            "mode": (run.get("contender") or {}).get("mode") or "frozen", "label": run_label(run),
            **_placement(run.get("environment")),
            **{k: run[k] for k in ("lowering_changed", "lowering_diff", "packages") if k in run}}


def _placement(env: dict | None) -> dict:
    """Where a run ran, from its environment record: platform ("cpu", "cuda", "tpu"), device (its kind: "NVIDIA
    H200", on a CPU its model) and how many; all None for a run that never reached a worker (nothing recorded)."""
    if not isinstance(env, dict) or not (env.get("platform") or env.get("backend")):
        return {"platform": None, "device": None, "device_count": None}
    hw = hardware_of(env)
    return {"platform": hw["platform"], "device": hw["device"], "device_count": hw["count"]}


def describe_runs(b: Bundle, runs: list[dict]) -> str:
    from ..analysis.timing_summary import TimingSummary

    ref_samples = b.manifest["reference"]["timing"]["samples_ns"]
    ref_timing = TimingSummary.of(ref_samples)
    ref_env = b.manifest["environment"]
    rows = [["reference", ref_env.get("jax", "?"), "ok", b.manifest["reference"]["route"],
             human_ns(ref_timing.median_ns), human_ns(ref_timing.iqr_ns), "1.00x", "bit-exact"]]
    notes = []
    for r in runs:
        resized = (r.get("labels") or {}).get("shape")  # replay --shape: other sizes than the reference's
        rows.append(_run_row(r, ref_timing, resized))
        notes += _run_notes(r, resized)
    if any(row[6] not in ("-", "1.00x") for row in rows[1:]) or runs:
        notes.insert(0, "VS REF: median over the pack's reference run, another process timed at pack time: not "
                        "comparable, so no verdict; `replay REF --jax A --jax B` times versions together")
    hardware = hardware_note(b.manifest.get("environment"), [r.get("environment") for r in runs
                                                               if r["status"] in ("ok", "mismatch")])
    text = (hardware + "\n" if hardware else "") + f"{b.ref}  ({_t(b.manifest['function']['fields']['fun_name'])})\n"
    text += table(["JAX", "VERSION", "STATUS", "ROUTE", "MEDIAN", "IQR", "VS REF", "OUTPUTS"], rows)
    if notes:
        import textwrap

        text += "\n" + "\n".join(w for n in notes for w in textwrap.wrap(n, 100, subsequent_indent="    "))
    return text


def _run_notes(r: dict, resized: str | None) -> list[str]:
    """What a run's row cannot say: why it failed or was resized, its packages, its lowering, its own notes."""
    from ..analysis.comparison import packages_text

    notes = []
    if r["status"] != "ok" or resized:
        notes.append(_t(f"jax {r['requested']}: {r['status']}: {r['reason']}"))
    if r.get("packages"):
        notes.append(_t(f"jax {run_label(r)}: the program's packages: {packages_text(r['packages'])}"))
    if "lowering_changed" in r:
        notes.append(_t(f"jax {run_label(r)}: lowering "
                        + (f"changed: {r.get('lowering_diff') or 'yes'}" if r["lowering_changed"] else
                           "unchanged from the bundle's")))
    return notes + [_t(f"jax {r['requested']}: {note}") for note in run_notes(r)]


def _run_row(r: dict, ref_timing: TimingSummary, resized: str | None) -> list[str]:
    from ..analysis.timing_summary import TimingSummary

    samples = (r.get("timing") or {}).get("samples_ns") or []
    t = TimingSummary.of(samples)
    # The reference ran in another process at pack time: the ratio of medians only, never a verdict.
    ratio = t.median_ns / ref_timing.median_ns if samples and not resized and ref_timing.median_ns else None
    check = r.get("check") or {}
    err = check.get("max_abs_err")
    return [
        run_label(r), r["environment"].get("jax", "?"), r["status"], r.get("route") or "-",
        human_ns(t.median_ns), human_ns(t.iqr_ns), f"{ratio:.2f}x" if ratio else "-",
        "-" if not check else "bit-exact" if check.get("bit_identical") else
        (f"{err:.2g}" if isinstance(err, (int, float)) else "?") + ("" if check.get("ok") else " (over tol)"),
    ]


def env_data(e) -> dict:
    return {"jax": e.jax_version, "python": e.python_version, "path": str(e.path) if e.path else None,
            "created": e.created, "bytes": e.size_bytes, "platform": getattr(e, "platform", "cpu"),
            "build": getattr(e, "build", "cpu"), "shared_bytes": getattr(e, "shared_bytes", None),
            "nightly": getattr(e, "nightly", None), "index": getattr(e, "index", None),
            "commits": dict(getattr(e, "commits", ())), "over": getattr(e, "over", None)}


def _jax_text(e) -> str:
    """`0.8.0`, `0.8.1.dev20251003 (nightly 2025-10-03)`, or `0.11.0.dev0+0145058aac12 (commit over 0.10.2)`."""
    nightly, over = getattr(e, "nightly", None), getattr(e, "over", None)
    if over:
        return f"{e.jax_version} (commit over {over})"
    return f"{e.jax_version} (nightly {nightly})" if nightly else e.jax_version


def added_data(added) -> dict:
    """An environment `envs --add` or `--add-commit` asked for (envs/ahead.py's Added), as data."""
    return {**env_data(added.env), "built": added.built, "seconds": added.seconds}


def added_text(added) -> str:
    """`built jax 0.4.31 (cpu, Python 3.11.7) in 12.3 s: PATH`, or `already there`; a commit's environment says what
    it runs over and how to replay it."""
    e = added.env
    what = f"jax {_t(e.jax_version)} ({_t(e.build)}, Python {_t(e.python_version)})"
    done = f"built {what} in {added.seconds:.1f} s" if added.built else f"{what} was already there"
    if added.over is None:
        return f"{done}: {_t(e.path)}"
    commit = dict(e.commits).get("jax", "")
    return (f"{done}: JAX's Python at {_t(commit[:10])} over jax {_t(added.over.jax_version)}'s environment (jaxlib "
            f"{_t(e.jaxlib_version)})\n  {_t(e.path)}\n  replay on it: reprobundle replay NAME --jax {_t(e.path)}")


def nightly_text(info: dict) -> str:
    """The nightly part of a bisect's answer: both builds with their commits, the compare URLs, skipped days."""
    lines = []
    for key, what in (("last_good", "last good"), ("first_bad", "first bad")):
        lines += _nightly_build_lines(info[key], what)
    for name in ("jax", "xla"):
        if info["compare"].get(name):
            lines.append(f"  {name} changes: {info['compare'][name]}")
    if info.get("same_build"):
        lines.append("  both were built from the same commits: the difference is not in the source")
    for s in info.get("skipped_days") or []:
        lines.append(f"  skipped {s['date']}: {s['reason']}")
    lines += ["  install them:"] + [f"    {line}" for line in info.get("install") or []]
    lines.append(f"  replay them: {info['command']}")
    return "nightlies:\n" + "\n".join(lines)


def bisect_left_out_text(left_out: dict[str, str], last_good: str, first_bad: str) -> str:
    """The releases in a bisection's window that were never tested, since they cannot be installed (yanked, no
    jaxlib), and whether one lies between the last good and the first bad: the change may have come in it."""
    from ..envs.versions import version_key

    if not left_out:
        return ""
    named = ", ".join(f"{v} ({why})" for v, why in left_out.items())
    text = f"  not tested: {named}, not installable from the package index"
    inside = [v for v in left_out if version_key(last_good) < version_key(v) < version_key(first_bad)]
    if inside:
        text += (f"\n  so the change may have come in {' or '.join(inside)}, between the last good release "
                 f"{last_good} and the first bad one {first_bad}")
    return text


def bisect_layer_text(layer: dict) -> str:
    """The boundary part of a bisect's answer: which layer changed between the last good and the first bad
    release (investigate/search/boundary.py), and the commands to run next."""
    lines = [f"layer changed from {layer['last_good']} to {layer['first_bad']}: {layer['text']}"]
    lines += [f"  next ({step['what']}): {step['command']}" for step in layer.get("next") or []]
    return "\n".join(lines)


def _nightly_build_lines(b: dict, what: str) -> list[str]:
    """One nightly of a bisect's answer: its version, date and the commits it was built from."""
    when = f" ({b['date']})" if b.get("date") else ""
    built = f"jax@{str(b['jax'])[:12]}" if b.get("jax") else (b.get("ref") or "no commit recorded")
    if b.get("jaxlib") and b.get("jaxlib") != b.get("jax"):
        built += f", jaxlib@{str(b['jaxlib'])[:12]}"
    xla = f"XLA@{str(b['xla'])[:12]}" if b.get("xla") else "XLA unknown"
    lines = [f"  {what}: {b['version']}{when}, built from {built}, {xla}"]
    if not b.get("xla"):
        lines.append(f"    (XLA: {b.get('xla_source')})")
    return lines


def _size_text(e) -> str:
    """"3.1 GiB (2.9 GiB shared)": of an environment's bytes, those hardlinked from uv's cache, which other
    environments of the same packages share on disk."""
    if e.size_bytes is None:
        return "-"
    shared = getattr(e, "shared_bytes", None)
    return human_bytes(e.size_bytes) + (f" ({human_bytes(shared)} shared)" if shared else "")


def env_table(found) -> str:
    return table(["JAX", "PLATFORM", "PYTHON", "CREATED", "SIZE", "PATH"],
                 [[_jax_text(e), getattr(e, "build", "cpu"), e.python_version, (e.created or "")[:19],
                   _size_text(e), str(e.path)] for e in found])


def bisect_text(result, ref: str, timed_comparison: str | None, compared: bool) -> str:
    """A bisection's answer (investigate/search/bisection.BisectResult) for the terminal: the first bad release, how it was
    replayed and judged, each tested release, what was left out, the layer, the nightlies; the comparison when time
    judged (`timed_comparison`), else where to time the boundary; where the answer was stored."""
    human = (f"{_first_bad_line(result)} (last good: {result.last_good}; judged by {result.criterion})\n"
             + (f"  replayed: {result.mode_why}\n" if result.mode_why else "")
             + (f"  why: {result.why}\n" if result.why else "")
             + "".join(f"  {line}\n" for line in _cut_short_lines(result))
             + "\n".join(f"  {v}: {c}: {result.evidence.get(v, '')}" for v, c in result.classes.items()))
    if result.changed_defaults:
        human += "\n" + changed_defaults_text(result.changed_defaults, result.last_good, result.first_bad)
    human += "".join("\n" + _t(line, 600) for line in bisect_other_lines(result))
    if result.left_out:
        human += "\n" + bisect_left_out_text(result.left_out, result.last_good, result.first_bad)
    if result.layer:
        human += "\n" + bisect_layer_text(result.layer)
    if result.nightly:
        human += "\n" + nightly_text(result.nightly)
    if timed_comparison is not None:
        human += "\n\n" + timed_comparison
    elif compared:  # its probes ran each release once, untimed: their times would only be noise
        human += ("\n\nthe releases were judged by their outputs and timed by nothing here: `reprobundle replay "
                  f"{ref} --jax {result.last_good} --jax {result.first_bad}` times the two at the boundary")
    if result.answer_id:
        human += (f"\n\nanswer stored beside its runs ({result.answer_id}): `reprobundle show` lists it, "
                  "`reprobundle issue` reports it")
    return human


def _first_bad_line(result) -> str:
    """`first bad release: jax 0.4.34`; cut short, every release the change may be at and what was measured
    (bisection.first_bad_text)."""
    if result.unfinished and not result.nightly:
        from ..investigate.search.bisection import first_bad_text

        return first_bad_text(result)
    return f"first bad {'nightly' if result.nightly else 'release'}: jax {result.first_bad}"


def _cut_short_lines(result) -> list[str]:
    """Where a bisection went on from a stored one --max-time cut short, and what it left unfinished itself."""
    return [line for line in (result.resumed, f"unfinished: {result.unfinished}" if result.unfinished else None)
            if line]


def bisect_other_lines(result) -> list[str]:
    """What a bisection says beside its headline, a line each: its confirmation, every other change with its own
    first bad release, what was examined and is no regression, the releases beyond both ends, what it does not list
    (a slowdown under the resolution, one not placed, the releases never run)."""
    def how(mode: str | None) -> str:
        return "retraced" if mode == "retrace" else "frozen"

    lines = [f"  {result.confirmation['why']}"] if result.confirmation else []
    lines += [f"  also: {o['criterion']} ({how(o.get('mode'))}) changed at jax {o['first_bad']} (last good "
              f"{o['last_good']}): {o.get('evidence') or o['why']}" for o in result.also]
    lines += [f"  no regression: {a['criterion']} ({how(a.get('mode'))}): {a['why']}" for a in result.set_aside]
    lines += [f"  not monotone: {o['why']}" for o in result.beyond_ends]
    return lines + [f"  not listed: {e['line']}" for e in result.not_listed]


def investigation_text(data: dict) -> str:
    """`investigate`'s answer (investigate/chain.py): the first bad release and the layer, then each step: its
    status, its answer, where its time went, what it left and the command that reruns it alone."""
    what = "release" if data["steps"] and data["steps"][0]["name"] == "bisect" else "commit"
    lines = [_t(f"{data['ref']}: first bad {what} {data['first_bad'] or '(none)'} between {data['good']} and "
                f"{data['bad']}; layer: {data['layer'] or 'undecided'}", 300)]
    if data.get("chosen"):  # what the bisection looked at and why, whole (the step's line may be cut)
        lines.append(_t(f"  chosen: {data['chosen']}", 1000))
    if data.get("unsettled"):  # the headline slowdown explain's own measurement did not settle
        lines.append(_t(f"  {data['unsettled']}", 1000))
    if data.get("report_written_s") is not None:  # the headline's body, before anything else was searched
        from .investigation import report_line

        lines.append(_t(f"  {report_line(data)}", 600))
    for step in data["steps"]:
        spent = f" ({step['spent_s']:.0f} s)" if step["spent_s"] else ""
        # whole: a step's answer is one claim with its evidence, and a cut mid-sentence hides how it was measured
        lines.append(_t(f"  {step['name']}: {step.get('reused') or step['status']}{spent}: {step['answer']}",
                        ANSWER_LIMIT))
        if step.get("stored"):
            lines.append(_t(f"      kept: {step['stored']}", 300))
        if step.get("command"):
            lines.append(_t(f"      alone: {step['command']}", 600))
    return "\n".join(lines)


def changes_text(d: dict, limit: int = 40) -> str:
    """`changes A B`: the revisions, then per kind (XLA flags, JAX options) the defaults that changed, what was
    added (booleans switched on first) and what was removed; libtpu's flags by name where an environment has it;
    at most `limit` lines of each."""
    from ..analysis.release_delta import flag_value

    ra, rb = d["revisions"]["a"] or {}, d["revisions"]["b"] or {}
    lines = [_t(f"jax {d['a']} -> {d['b']} (jaxlib {ra.get('jaxlib')} -> {rb.get('jaxlib')}"
                + (f", jaxlib git {str(ra.get('jaxlib_git'))[:10]} -> {str(rb.get('jaxlib_git'))[:10]}"
                   if ra.get("jaxlib_git") or rb.get("jaxlib_git") else "") + ")")]
    for key, what, prefix in (("xla_flags", "XLA flags", "--"), ("jax_options", "JAX options", "")):
        part = d[key]
        lines.append(f"{what}: {part['count_a']} -> {part['count_b']}: {len(part['changed'])} defaults changed, "
                     f"{len(part['added'])} added, {len(part['removed'])} removed")
        for c in part["changed"][:limit]:
            lines.append(_t(f"  changed  {prefix}{c['name']}: {flag_value(c['a'])} -> {flag_value(c['b'])}", 300))
        added = sorted(part["added"], key=lambda c: c["default"] is not True)
        for c in added[:limit]:
            lines.append(_t(f"  added    {prefix}{c['name']}={flag_value(c['default'])} ({c['type']})", 300))
        for c in part["removed"][:limit]:
            lines.append(_t(f"  removed  {prefix}{c['name']} (was {flag_value(c['default'])})", 300))
    if d.get("libtpu"):
        lines += _libtpu_lines(d, limit)
    if not d["complete"]:
        lines.append("note: one release's flag list could not be read from its library (jaxlib's DebugOptions "
                     "descriptor not found): its flags are missing above")
    return "\n".join(lines)


def _libtpu_lines(d: dict, limit: int) -> list[str]:
    """libtpu's flags (set through LIBTPU_INIT_ARGS) by name, and once why no default of theirs is shown."""
    from ..analysis.release_delta import libtpu_line

    lt = d["libtpu"]
    lines = [_t(libtpu_line(d), 300)]
    lines += [_t(f"  added    --{name}", 300) for name in lt["added"][:limit]]
    lines += [_t(f"  removed  --{name}", 300) for name in lt["removed"][:limit]]
    return [*lines, _t(f"note: {lt['note']}", 400)]


def changed_defaults_text(changed: list[dict], good: str, bad: str, limit: int = 12) -> str:
    """The flags and options whose default changed at the boundary: candidates for the cause, not a diagnosis."""
    from ..analysis.release_delta import flag_value

    items = [(f"--{c['name']}" if c["kind"] == "flag" else c["name"])
             + (f" {flag_value(c['a'])} -> {flag_value(c['b'])}" if c["a"] is not None else f"={flag_value(c['b'])} (new)")
             for c in changed]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return _t(f"defaults changed from {good} to {bad}: {'; '.join(items[:limit])}{more} (candidates, not a cause: "
              f"`reprobundle changes {good} {bad}` lists every change; `explain` tries them)", 1500)
