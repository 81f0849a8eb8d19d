"""What the parts of a job's worker share: job.Worker holds it; the routes, timing and profiling mixins read it."""
from __future__ import annotations

from typing import Any, Optional

from .records import Attempt, Fields, Job, Result


class WorkerState:
    job: Job  # as read: job.Worker.validate checks its shape first
    result: Result  # written as the job goes
    notes: list[str]  # what the worker adjusted to run on this release
    attempts: list[Attempt]  # the load routes that failed, in order
    control: Any  # the lockstep channel to the host (None: the worker times on its own)
    fields: Optional[Fields]  # the bundle's fields of the Exported, if it has them
    host_inputs: list[Any]
    dev_inputs: list[Any]
    input_meta: list[Any]

    def import_export(self) -> Any:
        raise NotImplementedError

    def check_inputs(self, avals: Any, what: str) -> Optional[str]:
        raise NotImplementedError
