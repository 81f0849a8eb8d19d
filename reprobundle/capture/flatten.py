"""The host's side of `worker/flatten.py` (one definition, shared with the worker's retrace): a flattening the
call cannot take is a UsageError here."""

from __future__ import annotations

from typing import Callable, Iterable

from ..errors import UsageError
from ..worker.flatten import FlatCall, FlattenError, argument_names, describe_structure
from ..worker.flatten import flatten_call as _flatten_call

__all__ = ["FlatCall", "argument_names", "describe_structure", "flatten_call"]


def flatten_call(fn: Callable, args: tuple, kwargs: dict, static: Iterable[int | str] = ()) -> FlatCall:
    try:
        return _flatten_call(fn, args, kwargs, static)
    except FlattenError as e:
        raise UsageError(e.message, hint=e.hint) from None
