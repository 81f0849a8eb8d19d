"""Running reprobundle as another user, for permission-denied cases: these tests run as root, which file modes do not
stop, so a subprocess imports everything as root, warms up, then drops to `nobody` with os.setuid and runs the
commands. Folders it must reach are made world-traversable (`shared_dir`)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

CHILD = r"""
import contextlib, importlib, io, json, os, pkgutil, sys
import reprobundle
for m in pkgutil.walk_packages(reprobundle.__path__, "reprobundle."):
    if m.name.startswith(("reprobundle.worker.__main__", "reprobundle.capture.site")):
        continue
    try:
        importlib.import_module(m.name)
    except Exception:
        pass
from reprobundle.cli import main

def cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return [code, out.getvalue(), err.getvalue()]

spec = json.loads(sys.argv[1])
for argv in spec["warmup"]:  # as root, on readable copies: every lazy import happens here
    cli(argv)
os.setgroups([])
os.setgid(spec["gid"])
os.setuid(spec["uid"])
results = [cli(argv) for argv in spec["commands"]]
print("RESULTS " + json.dumps(results))
"""


def nobody() -> tuple[int, int]:
    """(uid, gid) to drop to; skips the test where that is impossible."""
    if os.geteuid() != 0:
        pytest.skip("not root: permission cases need a user whose reads the modes stop (run as root, or chmod works "
                    "directly: these tests drop from root to nobody)")
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user `nobody` to drop privileges to")
    return entry.pw_uid, entry.pw_gid


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A temporary folder every user can traverse and write (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="reprobundle-nobody-", dir="/tmp"))
    try:
        path.chmod(0o777)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_as_nobody(commands: list[list[str]], *, warmup: list[list[str]], env: dict[str, str],
                  timeout: float = 180) -> list[tuple[int, str, str]]:
    """Run CLI commands in one subprocess as `nobody` (after `warmup` commands as root); (code, out, err) each."""
    uid, gid = nobody()
    spec = {"uid": uid, "gid": gid, "warmup": warmup, "commands": commands}
    old = os.umask(0o022)
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    finally:
        os.umask(old)
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULTS ")), None)
    assert line is not None, done.stderr[-3000:] + done.stdout[-2000:]
    return [tuple(r) for r in json.loads(line[len("RESULTS "):])]
