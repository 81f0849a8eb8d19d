"""The command line: parse, call the library, render. The commands live in bundles.py, replays.py and sharing.py
(registered on common.app in that order: the order --help lists them); runner.py runs the app and maps every
outcome to one line and an exit code.

This module is what the `reprobundle` script and `python -m reprobundle` load first, so it stays tiny (the standard
library only): `run` makes Ctrl-C and SIGTERM end the process quietly before anything heavy loads, then hands over
to `main`. `main`, `app` and the rest load on first use, so importing the package's CLI costs nothing either."""

from __future__ import annotations

import sys

from .start import quiet_signals, start_point


def run() -> None:
    quiet_signals()
    start_point("entry")
    from .runner import main as run_main

    sys.exit(run_main())


# from runner, app included: loading runner registers the commands on it
_LAZY = {"main": "runner", "app": "runner", "Interrupted": "runner", "Terminated": "runner"}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
