"""The one in-process CLI runner the tests share."""

import contextlib
import io

from reprobundle.cli import main


def cli(*argv, store=None) -> tuple[int, str, str]:
    """Run `reprobundle ARGV [--store STORE]` in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    full = [str(a) for a in argv] + (["--store", str(store)] if store else [])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(full)
    return code, out.getvalue(), err.getvalue()
