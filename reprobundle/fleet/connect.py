"""The executor a command runs its replay tasks on: this process, or a Ray cluster (fleet/ray_executor.py, which
needs the reprobundle[ray] extra and is imported only when asked for)."""

from __future__ import annotations

from ..errors import UsageError
from ..text import exception_line
from .executor import Executor, LocalExecutor


def executor_for(ray_address: str | None = None) -> Executor:
    """The local executor, or with `ray_address` the Ray executor connected to that cluster (fleet/ray_executor.py,
    which needs the reprobundle[ray] extra)."""
    if not ray_address:
        return LocalExecutor()
    try:
        from .ray_executor import RayExecutor
    except ImportError as e:
        raise UsageError(f"--ray {ray_address} needs Ray, which is not installed here ({exception_line(e, 120)})",
                         hint="pip install 'reprobundle[ray]' (the same on every node of the cluster)") from None
    return RayExecutor(ray_address)


