"""User code run inside reprobundle (a pack script, its factory, the function while it is traced) may not end the
process: `sys.exit(5)` would become pack's own exit code 5 ("already exists") and `os._exit(0)` a silent success
without a bundle. Inside `user_code`, both are a ScriptError naming the call instead."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

from ..errors import ScriptError


class _ProcessExit(BaseException):
    """os._exit called by user code: a BaseException, so the user's own `except Exception` does not swallow it."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


@contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run user code (`what` names it in the error) with `sys.exit` and `os._exit` turned into ScriptError."""
    real_exit = os._exit

    def refuse_exit(code: int = 0) -> None:
        if threading.current_thread() is not threading.main_thread():
            real_exit(code)  # not the user's call being run here (a watchdog, a pool's worker)
        raise _ProcessExit(code)

    os._exit = refuse_exit  # type: ignore[assignment]
    try:
        yield
    except SystemExit as e:
        raise ScriptError(f"{what} called sys.exit({e.code!r}) instead of returning",
                          hint="a factory returns (fn, args) or (fn, args, kwargs); guard a script's own "
                               "command-line code with `if __name__ == '__main__':`") from None
    except _ProcessExit as e:
        raise ScriptError(f"{what} called os._exit({e.code!r}) instead of returning",
                          hint="a factory returns (fn, args) or (fn, args, kwargs); nothing was packed") from None
    finally:
        os._exit = real_exit
