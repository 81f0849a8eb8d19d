"""Capture a JAX function as data: the only package that runs JAX in the host process.

It turns a jittable function and its arguments, an already serialized `jax.export` artifact, or a raw StableHLO
module into an `ExportedFunction` (bytes and plain fields, nothing tied to this JAX version) plus the flat input
leaves as numpy arrays (export.py, flatten.py, pack.py).

It also captures from a running program (hook.py, session.py, program_launch.py, staging.py): called, this package is
the context manager `reprobundle.capture(match=..., store=...)` (see session.Capture), so
`with reprobundle.capture(match="train_step") as cap: ...` works while `reprobundle.capture.export` stays the
module it always was.
"""

import sys as _sys
import types as _types


class _CaptureModule(_types.ModuleType):
    def __call__(self, match=None, **options):
        """reprobundle.capture(match=None, *, call=None, top=None, all_signatures=False, name=None, store=None,
        ...): see reprobundle.capture.session.Capture."""
        from .session import Capture

        return Capture(match, **options)


_sys.modules[__name__].__class__ = _CaptureModule
