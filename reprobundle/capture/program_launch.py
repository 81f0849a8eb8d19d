"""`reprobundle capture -- python train.py ...`: run an unmodified program with the capture hook, then pack.

The program runs as a child process with its own stdin, stdout and stderr, its arguments untouched, and two
additions to its environment: the folder of reprobundle's capture `sitecustomize` first on PYTHONPATH (Python
imports it at startup; it installs the hook when the program imports jax), and REPROBUNDLE_CAPTURE (the options
and the session folder, JSON). Results come back as files in that folder (staging.py). The child's exit code is
passed through; Ctrl-C reaches the program as it would without reprobundle, and the captures it had staged are
still packed; a program that crashes after a capture keeps its bundles.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..bundle.redaction import redact_argv
from ..config import settings
from ..errors import UsageError, disk_full, space_for
from ..store.scratch import no_room, temp_folder
from ..store.watchdog import handling_signals, remove_tracked, track, untrack
from ..worker.protocol import NO_SPACE_TEXTS
from . import staging
from .staging import CaptureOptions

SITE_DIR = Path(__file__).parent / "site"
PACKAGE_ROOT = Path(__file__).parent.parent.parent  # the folder that holds the reprobundle package
_POLL_S = 0.5


@dataclass
class ProgramRun:
    exit_code: int
    interrupted: bool
    directory: Path
    reports: list[dict]
    staged_dirs: list[Path]


def exit_code_of(returncode: int) -> int:
    """A process's exit status as a shell reports it: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def child_environment(options: CaptureOptions, directory: Path, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env[staging.ENV_OPTIONS] = staging.child_config(options, directory)
    env[staging.ENV_ROOT] = str(PACKAGE_ROOT)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _executable(command: Sequence[str]) -> None:
    if not command:
        raise UsageError("no program to run", hint="put it after --: reprobundle capture --list -- python train.py")
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not Path(program).exists():
            raise UsageError(f"{program}: no such file")
    elif shutil.which(program) is None:
        raise UsageError(f"{program}: command not found", hint="give the interpreter, e.g. -- python train.py")


def _stop(proc: subprocess.Popen) -> int:
    """After Ctrl-C: the program got the SIGINT from the terminal too; give it time to finish (its capture hook
    stages what is pending at exit), then ask again, then terminate it."""
    for send, wait_s in ((None, 3.0), (signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if send is not None:
            try:
                proc.send_signal(send)
            except ProcessLookupError:
                pass
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def run_program(command: Sequence[str], options: CaptureOptions, *,
                progress: Callable[[str], None] | None = None, directory: Path | None = None) -> ProgramRun:
    """Run `command` under the capture hook and wait for it; staged captures are announced as they appear."""
    _executable(command)
    if directory is None:
        with space_for(temp_folder(), None, "the capture's folder", work=True):
            directory = Path(tempfile.mkdtemp(prefix="reprobundle-capture-", dir=temp_folder()))
    track(directory)  # removed by capture_program when it ends, or by the watchdog if a signal ends the process
    env = child_environment(options, directory)
    announced: set[str] = set()

    def announce() -> None:
        if progress is None:
            return
        for path in staging.staged_dirs(directory):
            if path.name in announced:
                continue
            announced.add(path.name)
            try:
                meta = staging.read_staged_summary(path)
            except Exception:
                continue
            fn = meta["function"]
            what = "staged (a --top candidate)" if options.top is not None else "captured"
            progress(f"{what} {fn.get('display') or fn['name']} at call {meta['call']} "
                     f"(signature {meta['signature']}); packed when the program ends")

    try:
        proc = subprocess.Popen(list(command), env=env)
    except OSError as e:
        raise UsageError(f"cannot run {command[0]}: {e.strerror or e}") from None
    interrupted = False
    try:
        with handling_signals():  # Ctrl-C stops the program; what it captured is still packed
            while True:
                try:
                    returncode = proc.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    announce()
    except KeyboardInterrupt:
        interrupted = True
        if progress:
            progress("interrupted: waiting for the program to stop (Ctrl-C again to kill it)")
        try:
            returncode = _stop(proc)
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            _discard(directory)
            raise
    except BaseException:  # SIGTERM (cli.Terminated) or an error: the program does not outlive its capture
        proc.kill()
        proc.wait()
        _discard(directory)
        raise
    announce()
    return ProgramRun(exit_code=exit_code_of(returncode), interrupted=interrupted, directory=directory,
                      reports=staging.read_reports(directory), staged_dirs=staging.staged_dirs(directory))


def capture_program(command: Sequence[str], options: CaptureOptions, pack_options, *,
                    progress: Callable[[str], None] | None = None):
    """Run the program under the hook, then pack what it staged (session.pack_captures); a CaptureResult."""
    from .session import CaptureResult, export_failures, pack_captures

    options.check()
    run = run_program(command, options, progress=progress)
    shown = redact_argv(command)  # what is stored, printed or exported of the command line: never its secrets
    try:
        _check_room(run, options)
        hooked = [r for r in run.reports if r.get("jax")]
        problems = _report_problems(run, hooked)
        rows = [row for r in hooked for row in r.get("rows") or []]
        staged, unreadable = _read_staged(run.staged_dirs)
        problems += unreadable
        captures: list[dict] = []
        failures: list[dict] = []
        if options.capturing:
            from .export import keep_host_off_device

            keep_host_off_device()  # the program let go of a TPU at its exit: the reference workers open it now
            captures, failures = pack_captures(staged, rows, options, pack_options, command=shown,
                                               progress=progress)
        failures = export_failures(rows, options, captures) + failures
        return CaptureResult(computations=rows, captures=captures, failures=failures,
                             timed=options.timing, exit_code=run.exit_code, command=shown,
                             interrupted=run.interrupted, problems=problems, store=pack_options.store)
    finally:
        _discard(run.directory)


def _check_room(run: ProgramRun, options: CaptureOptions) -> None:
    """DiskFullError when the capture folder filled up (the machine's condition, not the program's): the hook said
    so (a failure or problem of no space), or nothing came back from the program where no room is left."""
    nothing_back = not run.reports or (options.capturing and not run.staged_dirs)
    if _hook_said_no_space(run.reports) or (nothing_back and no_room(run.directory)):
        raise disk_full(run.directory.parent, None, "the computations the program staged", work=True)


def _hook_said_no_space(reports: list[dict]) -> bool:
    """Whether a report's error, problems or failed captures say there was no room to write."""
    said = [str(r.get("error") or "") for r in reports]
    said += [str(p) for r in reports for p in r.get("problems") or []]
    said += [str(row.get("failure") or "") for r in reports for row in r.get("rows") or []]
    return any(text in line for line in said for text in NO_SPACE_TEXTS)


def _report_problems(run: ProgramRun, hooked: list[dict]) -> list[str]:
    """What the program's processes reported going wrong, and why nothing was seen when no process saw jax."""
    problems: list[str] = []
    for r in run.reports:
        if r.get("error"):
            problems.append(str(r["error"]))
        problems += [str(p) for p in r.get("problems") or []]
    if not run.reports:
        problems.append("no Python process of the program loaded the capture hook (is it a Python program? "
                        "python -I, -E or -S ignores PYTHONPATH and site)")
    elif not hooked and not any(r.get("error") for r in run.reports):
        problems.append("the program was interrupted before it had imported jax" if run.interrupted
                        else "the program never imported jax")
    return problems


def _read_staged(paths) -> tuple[list, list[str]]:
    """The staged captures that read back, and a problem for each that does not."""
    staged, problems = [], []
    for path in paths:
        try:
            staged.append(staging.read_staged(path))
        except Exception as e:  # a capture the program was killed while writing is simply not there
            problems.append(f"staged capture {path.name} is unreadable: {e}")
    return staged, problems


def _discard(directory: Path) -> None:
    """The program's staging folder, gone (kept with REPROBUNDLE_DEBUG=1, to look into)."""
    if settings().debug != "1":
        remove_tracked(directory)
    else:
        untrack(directory)
