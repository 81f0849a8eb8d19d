"""Commands that replay or read runs: replay, explain, isolate, minimize, compare, bisect, sweep, history, envs. The library
loads inside each command (only what it uses): loading this module must cost nothing beyond typer
(tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..config import DEFAULT_STEPS, DEFAULT_TIMEOUT_S, DEFAULT_WARMUP, ISOLATE_WARMUP
from ..errors import EXIT_NOT_OK, UsageError
from ..text import clean_values
from .common import (
    BaselineOpt,
    FindLinksOpt,
    FreshWorkersOpt,
    HtmlOpt,
    IndexOpt,
    JobsOpt,
    JsonOpt,
    MaxTimeOpt,
    PinOpt,
    PlatformOpt,
    RayOpt,
    ReleaseIndexOpt,
    ReportOpt,
    RetraceOpt,
    RoundsOpt,
    SamplesOpt,
    StoreOpt,
    VariantOpt,
    app,
    comparison_text,
    emit,
    parse_labels,
    progress_sink,
    spent_table,
    terminal,
    without_samples,
    write_files,
    write_reports,
)


@app.command()
def replay(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="JAX to replay on (repeatable): a release, 'installed' "
                                                            "(this interpreter's, the default), 'latest', a nightly "
                                                            "(nightly:2025-10-03 or 0.8.0.dev20251003), or the path "
                                                            "of a Python interpreter or environment, used as it is."),
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(DEFAULT_STEPS, "--repeat",
                               help="Timed steps per version over 8 rounds, so repeat/8 a round (all rounds with "
                                    "--rounds); a step is one call, or a batch of calls lasting ~50 ms."),
    rounds: Optional[int] = RoundsOpt,
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    no_profile: bool = typer.Option(False, "--no-profile"),
    baseline: Optional[str] = BaselineOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    shapes: List[str] = typer.Option([], "--shape", help="NAME=SIZE: run a shape-polymorphic bundle at another "
                                                          "size, on synthetic inputs (repeatable)."),
    platform: Optional[str] = PlatformOpt,
    max_time: Optional[float] = MaxTimeOpt,
    pin: Optional[str] = PinOpt,
    variants: List[str] = VariantOpt,
    retrace: bool = RetraceOpt,
    mode: str = typer.Option("frozen", "--mode", help="frozen (the stored program), retrace, or both (per version "
                                                      "a frozen and a retraced contender, timed together)."),
    retrace_package: List[str] = typer.Option([], "--retrace-package", help="NAME==VERSION: the release of one of "
                                                                           "the program's packages a retrace installs "
                                                                           "(default: resolved with each jax)."),
    index_url: Optional[str] = IndexOpt,
    find_links: List[str] = FindLinksOpt,
    as_json: bool = JsonOpt,
    call_limit: Optional[float] = typer.Option(None, "--call-limit", help="Seconds one call may take (n calls in a "
                                               "row: n times that + 60 s) before its worker is killed as a runaway "
                                               "(default: 100 x the reference's median call)."),
    compile_limit: Optional[float] = typer.Option(None, "--compile-limit", help="Seconds a worker may load, lower "
                                                  "and compile the function (default 600)."),
    memory_limit: Optional[int] = typer.Option(None, "--memory-limit", help="MiB of memory each worker may use "
                                               "(RLIMIT_DATA; default: 80% of the memory available, shared; 0: none)."),
    no_memory_check: bool = typer.Option(False, "--no-memory-check", help="Run a module that XLA's memory analysis "
                                                                          "says cannot fit in the memory free."),
) -> None:
    """Rerun a bundle on one or more JAX versions and compare them."""
    from .. import api
    from ..bundle.dims import several_sizes

    sizes = several_sizes(shapes)  # --shape seq=128,256,512: one replay per size, a table and a chart by size
    options = api.ReplayOptions.of(warmup=warmup, repeat=repeat, rounds=rounds, timeout_s=timeout,
                                   profile=not no_profile, shapes=None if sizes else shapes, platform=platform,
                                   max_time_s=max_time, pin=pin, retrace_packages=tuple(retrace_package),
                                   call_limit_s=call_limit,
                                   memory_limit_bytes=None if memory_limit is None else memory_limit << 20,
                                   memory_check=not no_memory_check,
                                   compile_limit_s=api.ReplayOptions().compile_limit_s if compile_limit is None
                                   else compile_limit)
    versions = jax_versions or ([] if variants else ["installed"])
    mode = "retrace" if retrace and mode == "frozen" else mode
    if sizes:
        _replay_sizes(ref, versions, shapes, baseline, report_path, html_path, as_json, options=options,
                      variants=variants, store=store, python=python, progress=progress_sink(),
                      index_url=index_url, mode=mode)
        return
    result = api.replay(ref, versions, store=store, options=options, python=python, progress=progress_sink(),
                        variants=variants, index_url=index_url, mode=mode)
    _show_replay(result, ref, store, baseline, report_path, html_path, as_json)


def _show_replay(result, ref: str, store: Optional[str], baseline: Optional[str], report_path: Optional[Path],
                 html_path: Optional[Path], as_json: bool) -> None:
    """A replay's output: its runs, the comparison of its versions (written as reports when asked), exit 9 unless
    every run was ok."""
    from .. import api
    from ..render import listing as report

    multi = len(result.runs) > 1
    comparison = None
    if multi or report_path or html_path or baseline:
        comparison = api.replay_comparison(result, baseline)
        write_reports(comparison, report_path, html_path, ref, store)
    data = {"runs": [report.run_data(r) for r in result.runs], "comparison": comparison}
    # Several versions: the comparison says everything, headlines first; one version: the run against the pack.
    human = comparison_text(comparison) if comparison is not None and multi else \
        report.describe_runs(result.bundle, result.runs)
    emit(as_json, data, human)
    if any(r["status"] != "ok" for r in result.runs):
        raise typer.Exit(EXIT_NOT_OK)


def _replay_sizes(ref: str, versions: List[str], shapes: List[str], baseline: Optional[str],
                  report_path: Optional[Path], html_path: Optional[Path], as_json: bool, **options) -> None:
    from .. import api
    from ..render import sizes as sizes_render

    data = api.replay_sizes(ref, versions, shapes, baseline=baseline, **options)
    write_files(data, ((report_path, sizes_render.to_markdown), (html_path, sizes_render.to_html)))
    emit(as_json, sizes_render.sizes_data(data), sizes_render.to_text(clean_values(sizes_render.sizes_data(data))))
    if any(r["status"] != "ok" for size in data["sizes"] for r in size["rows"]):
        raise typer.Exit(9)


@app.command()
def explain(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="The baseline version, then the candidate (twice; "
                                           "default: the last good and first bad release of a stored answer)."),
    warmup: int = typer.Option(2, "--warmup"),
    repeat: int = typer.Option(DEFAULT_STEPS, "--repeat", help="Steps per 8 rounds, as replay's."),
    rounds: Optional[int] = RoundsOpt,
    max_time: float = typer.Option(240.0, "--max-time", help="Seconds explain may take, the evidence compile "
                                                             "included (its timing gets at least 30 s)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    index_url: Optional[str] = ReleaseIndexOpt,
    find_links: List[str] = FindLinksOpt,
    platform: Optional[str] = PlatformOpt,
    retrace: Optional[bool] = typer.Option(None, "--retrace/--frozen", help="Explain the program as each release "
                                           "traces it, or the stored (frozen) module. Default: retraced when only "
                                           "the retraced outputs differ (a JAX option's change shows only there)."),
    by: Optional[str] = typer.Option(None, "--by", help="What judges an experiment: outputs (against the "
                                                       "baseline's, within the tolerance), bits, time. Default: "
                                                       "outputs when they differ beyond the tolerance, else time."),
    release_delta: bool = typer.Option(True, "--release-delta/--no-release-delta", help="Try each default that "
                                       "changed between the two releases (XLA flags, JAX options), set back."),
    reach: List[str] = typer.Option([], "--reach", help="A release after the candidate to measure a workaround on "
                                    "(repeatable; default: up to three cached here: the next, one between, the "
                                    "newest)."),
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    samples: bool = SamplesOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Why the candidate differs: the defaults that changed between the releases, the passes and flags, each tried
    on the candidate (screened, then measured with both), and the change that restores the baseline, with the line
    to paste."""
    from .. import api
    from ..render import explain as explain_render

    result = api.explain(ref, jax_versions, store=store, warmup=warmup, repeat=repeat, rounds=rounds,
                         max_time_s=max_time, timeout_s=timeout, platform=platform, python=python,
                         mode="auto" if retrace is None else "retrace" if retrace else "frozen", by=by,
                         release_delta=release_delta, profile=bool(report_path or html_path),
                         reach=reach or None, progress=progress_sink())
    write_files(result, ((report_path, explain_render.to_markdown), (html_path, explain_render.to_html)))
    data = explain_render.explain_data(result, samples=samples)
    emit(as_json, data, explain_render.to_text(clean_values(data)) + spent_table(result.get("spent")))


@app.command()
def isolate(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="The baseline version, then the candidate (twice)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the bundle the piece that moved most becomes "
                                                            "(default: NAME-piece-K)."),
    pieces: int = typer.Option(8, "--pieces", help="At most this many pieces."),
    warmup: int = typer.Option(ISOLATE_WARMUP, "--warmup"),
    repeat: int = typer.Option(DEFAULT_STEPS, "--repeat", help="Steps per 8 rounds, as replay's."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the timing of all pieces may take."),
    pin: Optional[str] = PinOpt,
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    fresh_workers: bool = FreshWorkersOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Split a bundle into pieces, time each alone on two versions and pack the one that moved as a small bundle."""
    from .. import api
    from ..render.isolate import isolation_data, isolation_text

    options = api.ReplayOptions.of(api.ISOLATE_OPTIONS, warmup=warmup, repeat=repeat, max_time_s=max_time, pin=pin,
                                   timeout_s=timeout, fresh_workers=fresh_workers)
    result = api.isolate(ref, jax_versions, store=store, name=name, max_pieces=pieces, options=options, python=python,
                         progress=progress_sink())
    emit(as_json, isolation_data(result), isolation_text(result))


@app.command()
def minimize(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="The baseline, then the candidate (twice; or once with "
                                                            "--variant; default: the last good and first bad "
                                                            "release of a stored answer)."),
    variants: List[str] = VariantOpt,
    outputs: bool = typer.Option(False, "--outputs", help="Keep a piece whose outputs differ between the two beyond "
                                                          "the tolerance a replay uses."),
    error: bool = typer.Option(False, "--error", help="Keep a piece the candidate fails on (same kind of error) and "
                                                      "the baseline runs."),
    slower: bool = typer.Option(False, "--slower", help="Keep a piece the candidate runs slower by a settled paired "
                                                        "verdict, that takes inputs and holds at least half the "
                                                        "time the whole bundle moved."),
    bits: bool = typer.Option(False, "--bits", help="With --outputs: any difference (dtype, shape, a single bit)."),
    min_ratio: Optional[float] = typer.Option(None, "--min-ratio", help="With --slower: at least this ratio "
                                                                        "(default: the verdict's own 1.02)."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the whole search may take; the best "
                                                                      "piece so far is kept."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the reduced bundle (default: NAME-min)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", help="Seconds one candidate may take on a worker."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Reduce a bundle to the few ops that still show the difference (outputs, error or slowdown) between two."""
    from .. import api
    from ..render import minimize as minimize_render

    named = [p for p, on in (("outputs", outputs), ("error", error), ("slower", slower)) if on]
    if len(named) > 1:
        raise UsageError("give at most one of --outputs, --error, --slower",
                         hint="without one, minimize chooses from a first run of both")
    result = api.minimize(ref, jax_versions, variants=variants, prop=named[0] if named else None, bits=bits,
                          min_ratio=min_ratio, max_time_s=max_time, name=name, store=store, timeout_s=timeout,
                          python=python, progress=progress_sink())
    data = minimize_render.minimize_data(result)
    write_files(data, ((report_path, minimize_render.to_markdown), (html_path, minimize_render.to_html)))
    emit(as_json, data, minimize_render.minimize_text(data))  # render cleans each value, line by line


@app.command()
def compare(
    refs: List[str] = typer.Argument(..., metavar="REF [REF_B]",
                                     help="A bundle; or two bundles of one program, each traced by its own release "
                                          "(capture --jax A, capture --jax B)."),
    jax_versions: List[str] = typer.Option([], "--jax", help="Versions to compare (default: every stored run; two "
                                                            "bundles with --replay: the release that traced each)."),
    replay: bool = typer.Option(False, "--replay", help="Two bundles: first time both on the --jax versions in one "
                                                        "interleaved measurement (a paired verdict per row)."),
    rounds: Optional[int] = RoundsOpt,
    max_time: Optional[float] = MaxTimeOpt,
    baseline: Optional[str] = BaselineOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Compare the stored runs of a bundle across JAX versions (preferring the latest replay timed together); or two
    bundles of one program traced by two releases: the lowering diff and the timings side by side."""
    from .. import api

    if len(refs) > 2:
        raise UsageError(f"compare takes one bundle or two, not {len(refs)}", hint="reprobundle compare REF_A REF_B")
    if len(refs) == 2:
        if baseline or report_path or html_path:
            raise UsageError("--baseline, --report and --html compare the versions of one bundle",
                             hint="for two bundles, B is compared with A; --json gives the data")
        from ..render.bundle_pair import pair_text

        data = api.compare_bundles(refs[0], refs[1], jax_versions, store=store, replay=replay, rounds=rounds,
                                   max_time_s=max_time, progress=progress_sink())
        emit(as_json, data, pair_text(clean_values(data), width=terminal()[0]))
        return
    if replay or rounds is not None or max_time is not None:
        raise UsageError("--replay, --rounds and --max-time time two bundles together",
                         hint=f"to time the versions of one bundle: reprobundle replay {refs[0]} --jax A --jax B")
    comparison = api.compare(refs[0], jax_versions or None, store=store, baseline=baseline)
    write_reports(comparison, report_path, html_path, refs[0], store)
    emit(as_json, comparison, comparison_text(comparison))


@app.command("bisect")
def bisect_cmd(
    ref: str,
    good: str = typer.Option(..., "--good", help="A JAX version where the bundle is fine (with --nightly: a release "
                                                 "or a nightly, nightly:2025-09-20)."),
    bad: str = typer.Option(..., "--bad", help="A later JAX version where it regressed."),
    nightly: bool = typer.Option(False, "--nightly", help="Search the nightlies between --good and --bad by date, "
                                                          "down to the commits of the last good and first bad."),
    index_url: Optional[str] = IndexOpt,
    find_links: List[str] = FindLinksOpt,
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(DEFAULT_STEPS, "--repeat", help="Timed steps per tested version, over all rounds."),
    rounds: Optional[int] = RoundsOpt,
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout"),
    python: Optional[str] = typer.Option(None, "--python"),
    report_path: Optional[Path] = ReportOpt,
    store: Optional[str] = StoreOpt,
    platform: Optional[str] = PlatformOpt,
    ray: Optional[str] = RayOpt,
    retrace: Optional[bool] = typer.Option(None, "--retrace/--frozen", help="Replay the program as each release "
                                           "traces it, or the stored (frozen) module. Default: the endpoints run both "
                                           "ways, and it retraces when only the retraced outputs differ."),
    by: Optional[str] = typer.Option(None, "--by", help="What tells a bad version apart: outputs (beyond the "
                                                       "replay's tolerance), bits (any difference from the good "
                                                       "one's outputs), time. Default: chosen, and said why."),
    layer: bool = typer.Option(True, "--layer/--no-layer", help="Replay the last good and first bad frozen and "
                                                                "retraced: which layer changed, the next command."),
    jobs: Optional[int] = JobsOpt,
    timed_probes: bool = typer.Option(False, "--timed-probes", help="Time every probe, one version a step (the "
                                                                    "slower path before untimed outputs probes; "
                                                                    "to compare with)."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the whole bisection may take: no "
                                                                      "probe starts that would end past it; what "
                                                                      "was narrowed is kept, and the same command "
                                                                      "again goes on from it."),
    samples: bool = SamplesOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Search the released JAX versions (or, with --nightly, the nightlies) between --good and --bad for the first
    bad one."""
    from .. import api
    from ..render import listing as report

    options = api.ReplayOptions.of(api.BISECT_OPTIONS, warmup=warmup, repeat=repeat, rounds=rounds, timeout_s=timeout,
                                   platform=platform, max_time_s=max_time)
    result, comparison = api.bisect(ref, good, bad, store=store, options=options, python=python,
                                    progress=progress_sink(), ray_address=ray, nightly=nightly, index_url=index_url,
                                    mode="auto" if retrace is None else "retrace" if retrace else "frozen", by=by,
                                    layer=layer, jobs=jobs, timed_probes=timed_probes)
    from ..render.change_table import changes_data

    if comparison is not None:
        write_reports(comparison, report_path, None, ref, store)
    data = {"good": result.good, "bad": result.bad, "criterion": result.criterion, "first_bad": result.first_bad,
            "last_good": result.last_good, "classes": result.classes, "evidence": result.evidence,
            "nightly": result.nightly, "comparison": comparison if samples else without_samples(comparison),
            "by": result.by, "why": result.why, "outputs_apart": result.outputs_apart, "layer": result.layer,
            "spent": result.spent, "left_out": result.left_out, "mode": result.mode, "mode_why": result.mode_why,
            "answer_id": result.answer_id, "also": result.also, "changed_defaults": result.changed_defaults,
            "beyond_ends": result.beyond_ends, "set_aside": result.set_aside,
            "confirmation": result.confirmation, "changes": changes_data(result), "unfinished": result.unfinished,
            "resumed": result.resumed, "not_listed": result.not_listed}
    timed = comparison_text(comparison) if comparison is not None and result.criterion == "time" else None
    human = report.bisect_text(result, ref, timed, comparison is not None)
    emit(as_json, data, human + spent_table(result.spent))


@app.command("bisect-commits")
def bisect_commits_cmd(
    ref: str,
    good: Optional[str] = typer.Option(None, "--good", help="The release before the change (default: the last good "
                                                            "release of the bundle's stored bisection)."),
    bad: Optional[str] = typer.Option(None, "--bad", help="The release with the change (default: the stored "
                                                          "bisection's first bad release), or a commit of the JAX "
                                                          "repository (a hash, a branch such as main, a tag that is "
                                                          "no release): then the commits from --good to it, each "
                                                          "over --good's jaxlib, no release bisection needed."),
    jax_repo: Optional[str] = typer.Option(None, "--jax-repo", help="A clone of JAX (PATH) or its URL; default: "
                                                                    "JAX's public repository, cloned once into the "
                                                                    "cache."),
    xla_repo: Optional[str] = typer.Option(None, "--xla-repo", help="A local clone of XLA: list the commits between "
                                                                    "the releases' pinned XLA that touch a flag "
                                                                    "whose default changed (git log -G)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout"),
    python: Optional[str] = typer.Option(None, "--python"),
    store: Optional[str] = StoreOpt,
    platform: Optional[str] = PlatformOpt,
    jobs: Optional[int] = JobsOpt,
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the whole search may take: no "
                                                                      "probe starts that would end past it; what "
                                                                      "was narrowed is kept, and the same command "
                                                                      "again goes on from it."),
    as_json: bool = JsonOpt,
) -> None:
    """Search JAX's commits between two adjacent releases for the first bad one: JAX's Python at each commit over
    a released jaxlib, the program retraced and judged as the release bisection judged it. With --bad COMMIT, from
    the release --good to that commit, judged by what tells the two apart."""
    from .. import api
    from ..render.commits import commit_bisection_text

    options = api.ReplayOptions.of(api.COMMIT_OPTIONS, timeout_s=timeout, platform=platform)
    answer = api.bisect_commits(ref, good, bad, store=store, jax_repo=jax_repo, xla_repo=xla_repo, options=options,
                                python=python, jobs=jobs, progress=progress_sink(), max_time_s=max_time)
    emit(as_json, answer, commit_bisection_text(answer) + spent_table(answer["spent"]))


@app.command()
def changes(
    a: str = typer.Argument(..., metavar="A", help="The older release (e.g. 0.4.31)."),
    b: str = typer.Argument(..., metavar="B", help="The newer release (e.g. 0.4.33)."),
    python: Optional[str] = typer.Option(None, "--python"),
    platform: Optional[str] = typer.Option(None, "--platform", help="The build whose environments are read: cpu, "
                                                                    "cuda (cuda12, cuda13), rocm, tpu (default: this "
                                                                    "machine's accelerator, else cpu)."),
    index_url: Optional[str] = ReleaseIndexOpt,
    find_links: List[str] = FindLinksOpt,
    as_json: bool = JsonOpt,
) -> None:
    """What changed between two releases, as they say themselves: XLA flags and JAX options added, removed, and
    whose default changed, and libtpu's flags by name on a TPU (each release's environment is made if missing; what
    it says is cached beside it)."""
    from .. import api
    from ..render import listing as report

    found = api.changes(a, b, python=python, platform=platform, progress=progress_sink())
    emit(as_json, found, report.changes_text(found))


@app.command()
def investigate(
    ref: str,
    good: str = typer.Option(..., "--good", help="A release on which the bundle behaved (e.g. 0.7.2)."),
    bad: str = typer.Option(..., "--bad", help="A later release on which it did not, or a JAX commit (a hash, main; "
                                               "with --jax-repo): then the commits from --good to it are searched."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the whole investigation may take: "
                                                                      "no step or probe starts that would end past "
                                                                      "it; what was answered is kept, and the next "
                                                                      "call runs what was left."),
    issue_file: Optional[Path] = typer.Option(None, "--issue", "-o", help="Write the issue body here (default: "
                                                                          "NAME-issue.md)."),
    report_path: Optional[Path] = typer.Option(None, "--report", help="Write a Markdown report: each step's answer, "
                                                                      "its time, the command that reruns it."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="The same report as an HTML page."),
    python: Optional[str] = typer.Option(None, "--python"),
    retrace: Optional[bool] = typer.Option(None, "--retrace/--frozen", help="Bisect the program as each release "
                                           "traces it, or the stored (frozen) module. Default: the endpoints run both "
                                           "ways, and every change they show is bisected, the most severe first."),
    by: Optional[str] = typer.Option(None, "--by", help="Bisect only this kind of change: outputs (beyond the "
                                                       "tolerance), bits (any difference), time (a settled "
                                                       "slowdown). Default: each kind present, the most severe "
                                                       "first."),
    jax_repo: Optional[str] = typer.Option(None, "--jax-repo", help="A clone of JAX (PATH) or its URL: go on to "
                                           "the first bad commit for a change in JAX's lowering, and read the release "
                                           "notes (default: a clone an earlier bisect-commits left in the cache)."),
    again: bool = typer.Option(False, "--again", help="Recompute every step, even one whose answer for the same "
                                                      "question and builds is stored here (reused by default)."),
    index_url: Optional[str] = ReleaseIndexOpt,
    find_links: List[str] = FindLinksOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """From "it broke between --good and --bad" to the issue body, the change you asked about first: the most severe
    change the endpoints show bisected, its layer, explain, first bad commit, minimize, the newest release and the
    issue body; then every other change, the body written again as each lands. Each answer kept as it comes: Ctrl-C
    or --max-time leaves the body of all that was answered, and the next call goes on."""
    from .. import api
    from ..render import investigation as investigation_render
    from ..render import listing as report

    found = api.investigate(ref, good, bad, store=store, max_time_s=max_time, issue_path=issue_file, python=python,
                            progress=progress_sink(), mode="auto" if retrace is None else
                            "retrace" if retrace else "frozen", by=by, jax_repo=jax_repo, again=again)
    write_files(found.data(), ((report_path, investigation_render.to_markdown),
                               (html_path, investigation_render.to_html)))
    emit(as_json, found.data(), report.investigation_text(found.data()))


@app.command()
def sweep(
    selection: Optional[List[str]] = typer.Argument(None, metavar="[SELECTION]...",
                                                    help="Refs (NAME, NAME@3, NAME@TAG, sha256:PREFIX) or name globs "
                                                         "('attn*', quoted; the newest version of each name unless "
                                                         "one is given). Default: every bundle."),
    baseline: str = typer.Option("", "--baseline", help="The JAX version the candidates are compared with "
                                                        "(default with --versions: the first of the range)."),
    candidate: List[str] = typer.Option([], "--candidate", help="A JAX version under test (repeatable: all are "
                                                                "timed together with the baseline)."),
    releases: Optional[str] = typer.Option(None, "--versions", help="Every release from A to B as candidates "
                                                                    "(A..B, e.g. 0.7.2..0.9.2)."),
    label: List[str] = typer.Option([], "--label", help="Only bundles with this KEY=VALUE label (repeatable)."),
    rerun: bool = typer.Option(False, "--rerun", help="Replay every bundle, even those with a stored replay of both "
                                                      "versions with the same timing options."),
    ray: Optional[str] = RayOpt,
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(DEFAULT_STEPS, "--repeat", help="Timed steps per version and bundle, as replay's."),
    rounds: Optional[int] = RoundsOpt,
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the timing of each bundle may take "
                                                                       "(each bundle is then measured alone)."),
    pin: Optional[str] = PinOpt,
    platform: Optional[str] = PlatformOpt,
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    fresh_workers: bool = FreshWorkersOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    retrace: bool = RetraceOpt,
    index_url: Optional[str] = IndexOpt,
    find_links: List[str] = FindLinksOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay many bundles on a baseline and one or more candidate versions, timed together: one table, worst first.

    Exit 0 when every bundle ran with matching outputs (whatever the verdicts), 9 when one mismatched or failed."""
    from .. import api
    from ..render import sweep as sweep_render

    options = api.ReplayOptions.of(warmup=warmup, repeat=repeat, rounds=rounds, max_time_s=max_time, pin=pin,
                                   platform=platform, timeout_s=timeout, fresh_workers=fresh_workers)
    data = api.sweep(selection or [], baseline, candidate, store=store, releases=releases, labels=parse_labels(label),
                     rerun=rerun, ray_address=ray, options=options, progress=progress_sink(),
                     index_url=index_url, mode="retrace" if retrace else "frozen")
    data = clean_values(data)  # from bundles and run records: each value one line, escaped
    write_files(data, ((report_path, sweep_render.to_markdown), (html_path, sweep_render.to_html)))
    emit(as_json, sweep_render.sweep_data(data), sweep_render.to_text(data, width=terminal()[0])
         + spent_table(data.get("spent")))
    if data["counts"]["failed"] or data["counts"]["mismatch"]:
        raise typer.Exit(EXIT_NOT_OK)


@app.command()
def history(
    selection: Optional[List[str]] = typer.Argument(None, metavar="[SELECTION]...",
                                                    help="Refs or name globs, as sweep's. Default: every bundle."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="The release compared with (default: oldest)."),
    label: List[str] = typer.Option([], "--label", help="Only bundles with this KEY=VALUE label (repeatable)."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write one offline page (reports beside it)."),
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The registry across releases, from the stored runs only: bundles x releases, each cell the ratio to the
    baseline with its verdict where they were timed together."""
    from .. import api
    from ..render import history as history_render

    data = clean_values(api.history(selection or [], store=store, labels=parse_labels(label), baseline=baseline))
    if html_path is not None:
        links = api.history_reports(data, html_path.parent / f"{html_path.stem}-reports", store=store)
        write_files(data, ((html_path, lambda d: history_render.to_html(d, links)),))
    emit(as_json, history_render.history_data(data), history_render.to_text(data, *terminal()))


@app.command()
def envs(
    add: List[str] = typer.Option([], "--add", metavar="VERSION",
                                  help="Build the cached environment of this release now (repeatable): for an "
                                       "air-gapped machine, or to save the wait later."),
    add_commit: Optional[str] = typer.Option(None, "--add-commit", metavar="COMMIT",
                                             help="Make a kept environment of JAX's Python at this commit over "
                                                  "--over's environment; replay it with --jax PATH."),
    over: Optional[str] = typer.Option(None, "--over", metavar="RELEASE",
                                       help="The release whose cached environment (its jaxlib) --add-commit's JAX "
                                            "runs over (built first if missing)."),
    jax_repo: Optional[str] = typer.Option(None, "--jax-repo", help="--add-commit's JAX repository: a clone's path, "
                                                                    "or a URL cloned once into the cache (default: "
                                                                    "JAX's public repository)."),
    remove: Optional[str] = typer.Option(None, "--remove", help="Remove the environment of this JAX version (a "
                                                                "commit's: its version or path)."),
    remove_all: bool = typer.Option(False, "--remove-all", help="Remove every cached environment."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Only the environments of this platform or "
                                                                   "build (cpu, cuda, cuda12, cuda13, rocm, tpu); "
                                                                   "with --add, --add-commit: the build made (default: "
                                                                   "the first accelerator here, else cpu)."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    index_url: Optional[str] = ReleaseIndexOpt,
    find_links: List[str] = FindLinksOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List the cached per-version JAX environments (one per release and platform build, and JAX commits kept over
    one), build them ahead of time (--add, --add-commit), or remove them."""
    from ..envs.manager import EnvironmentManager
    from ..render import listing as report

    if add or add_commit or over:
        _envs_add(add, add_commit, over, jax_repo, platform, python, as_json, removing=bool(remove or remove_all))
        return
    manager = EnvironmentManager(None)  # as api.environment_manager(), without loading the whole library
    if remove or remove_all:
        _envs_remove(manager, None if remove_all else remove, platform, as_json)
        return
    found = manager.list() + manager.commit_environments()
    if platform:
        found = [e for e in found if platform in (e.platform, e.build)]
    emit(as_json, [report.env_data(e) for e in found],
          report.env_table(found) if found else f"no environments under {manager.root}")


def _envs_remove(manager, version: Optional[str], platform: Optional[str], as_json: bool) -> None:
    from ..render import listing as report

    gone = manager.remove(version, platform=platform)
    emit(as_json, [report.env_data(e) for e in gone],
          "\n".join(f"removed jax {e.jax_version} {e.build} (Python {e.python_version})" for e in gone)
          or "nothing removed")


def _envs_add(add: List[str], commit: Optional[str], over: Optional[str], jax_repo: Optional[str],
              platform: Optional[str], python: Optional[str], as_json: bool, *, removing: bool) -> None:
    """envs --add and --add-commit: what was built (or found), each with its path and seconds."""
    if removing:
        raise UsageError("--add and --add-commit cannot be combined with --remove or --remove-all",
                         hint="add and remove in two commands")
    if (commit is None) != (over is None):
        raise UsageError("--add-commit COMMIT needs --over RELEASE, and --over goes with --add-commit",
                         hint="reprobundle envs --add-commit COMMIT --over 0.10.2 --jax-repo PATH")
    from .. import api
    from ..render import listing as report

    sink = progress_sink()
    added = api.add_environments(add, platform=platform, python=python, progress=sink)
    if commit is not None and over is not None:
        added.append(api.add_commit_environment(commit, over, jax_repo=jax_repo, platform=platform, python=python,
                                                progress=sink))
    emit(as_json, [report.added_data(a) for a in added], "\n".join(report.added_text(a) for a in added))


# -- sharing: push / pull / copy / url / gc / cache ---------------------------------------------------------------
