"""A release whose module worker aborts while loading some modules, as one did on a user's transformer step with
"LLVM ERROR: Trying to register different dialects for the same namespace: builtin" (#63): real jaxlib cannot be
made to abort on purpose, so the release is this process's interpreter and jax behind an executable `python`.

Run as a module worker (`python -I -c LAUNCHER PID .../worker serve`), it serves modules with the real worker
package (worker/serve.py), whose load first tests `dies_when`, a Python expression of the module's `text` (and
`os`): where it holds, the worker writes LLVM's line to stderr and aborts (SIGABRT; faulthandler dumps the Python
stack after it, as on a real abort). Run any other way (a replay's job, `--jax PATH`'s probe), it is the real
interpreter. `--jax PATH` takes it as a release of its own: the CLI sees nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path

LLVM_LINE = "LLVM ERROR: Trying to register different dialects for the same namespace: builtin"

_PROGRAM = '''\
import os, runpy, sys

REAL = {real!r}
args = sys.argv[1:]
if args[-1:] != ["serve"]:
    os.execv(REAL, [REAL, *args])
runpy.run_path(os.path.join(args[-2], "__main__.py"), run_name="dying_release")  # loads the worker package
import reprobundle_worker.serve as serve

loaded = serve.ModuleServer.lower_text


def lower_text(self, text):
    if {dies_when}:
        sys.stderr.write({line!r} + "\\n")
        sys.stderr.flush()
        os.abort()
    return loaded(self, text)


serve.ModuleServer.lower_text = lower_text
sys.exit(serve.serve())
'''


def dying_release(folder: Path, dies_when: str) -> Path:
    """The executable `folder/bin/python` of a release whose module worker aborts loading a module where
    `dies_when` holds (e.g. `"text.count('stablehlo.sine') > 3"`)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    program = bin_dir / "release.py"
    program.write_text(_PROGRAM.format(real=sys.executable, dies_when=dies_when, line=LLVM_LINE))
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{program}" "$@"\n')
    python.chmod(0o755)
    return python


def dies_once(mark: Path) -> str:
    """`dies_when` for a worker that aborts loading its first module, once: the first process to load one leaves
    `mark`, and no process after it aborts."""
    return f"not os.path.exists({str(mark)!r}) and not open({str(mark)!r}, 'w').close()"
