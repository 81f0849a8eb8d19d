"""The retrace route: the bundle's program traced and lowered by this environment's jax.

The job's ``program`` names a folder the host wrote the bundle's source files into, the script in it, its factory
and the arguments pack baked in as static. The worker imports the script by path (here, in the environment under
test, never on the host), calls the factory, flattens its call exactly as pack did (flatten.py: key paths, typed
PRNG keys as key data plus impl, non-array leaves baked in), puts the bundle's stored input arrays in the place of
the factory's own (same key paths, shapes and dtypes, or a JobError naming the first that differs), and exports the
flat function with this release's ``jax.export``. From there the Exported takes the frozen routes' way: lowered,
compiled, run and timed by job.py. This release's StableHLO is kept as the ``stablehlo_retraced`` artifact.

Job (protocol 1, with ``mode: "retrace"``)::

  "program": {"dir": str,            # the folder holding the source files, as the manifest lists them
              "script": str,         # the script, relative to dir
              "factory": str,        # the function of the script that returns (fn, args) or (fn, args, kwargs)
              "static": [int|str],   # arguments pack baked in (argnums or names)
              "cache": str}          # optional: where the first round's worker leaves its Exported, serialized;
                                     # a later round's worker that finds it deserializes it instead of tracing

A factory that raises, a call whose leaves disagree with the bundle's inputs and a program this jax cannot trace or
export are that version's error (the factory's traceback tail follows the reason's first line); a module this
release lowers but XLA cannot compile is incompatible, as for the frozen routes.
"""
from __future__ import annotations

import os
import sys
import traceback

from .dtypes import dtype_name
from .flatten import FlattenError, flatten_call
from .protocol import JobError, exc_msg
from .state import WorkerState

RETRACE_ROUTE = "retrace"
TRACEBACK_LINES = 12


class Retrace(WorkerState):
    """The retrace route, mixed into job.Worker."""

    def route_retrace(self):
        import jax

        program = self.job.get("program")
        if not isinstance(program, dict) or not program.get("dir") or not program.get("script"):
            raise JobError("a retrace job needs a 'program' map with the source folder and script")
        cached = self._cached_export(program.get("cache"))
        if cached is not None:
            return cached, {"what": "the program traced by jax %s in this replay's first round" % jax.__version__,
                            "version": None}
        made = self._call_factory(program)
        fn, args, kwargs = made
        try:
            call = flatten_call(fn, tuple(args), dict(kwargs), program.get("static") or ())
        except FlattenError as e:
            raise JobError("retrace: %s (%s)" % (e.message, e.hint))
        self._check_leaves(call)
        _export = self.import_export()
        from jax import export

        specs = [jax.ShapeDtypeStruct(shape, dt) for shape, dt in self.input_meta]
        try:
            exp = export.export(jax.jit(call.fn_flat))(*specs)
        except Exception as e:
            raise JobError(self._failure("tracing and exporting the program failed on jax %s" % jax.__version__, e))
        del _export
        self._keep_stablehlo(exp)
        self._cache_export(program.get("cache"), exp)
        return exp, {"what": "the program traced by jax %s" % jax.__version__, "version": None}

    def _cached_export(self, path):
        """The Exported an earlier round of this replay traced here, or None (none yet, or it does not load)."""
        if not path or not os.path.isfile(path):
            return None
        try:
            self.import_export()
            from jax import export

            with open(path, "rb") as fh:
                return export.deserialize(bytearray(fh.read()))
        except Exception as e:
            self.notes.append("traced again: the first round's export did not load: %s" % exc_msg(e))
            return None

    def _cache_export(self, path, exp):
        """Leave the traced program where later rounds' workers find it (written whole, then renamed)."""
        if not path:
            return
        try:
            data = exp.serialize()
        except Exception as e:
            self.notes.append("each round traces again: serializing the export failed: %s" % exc_msg(e))
            return
        tmp = "%s.%d.tmp" % (path, os.getpid())
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError as e:  # a full disk costs the later rounds a trace each, not this round its run
            self.notes.append("each round traces again: keeping the export failed: %s" % exc_msg(e))
            try:
                os.remove(tmp)
            except OSError:
                pass

    def _call_factory(self, program):
        """(fn, args, kwargs) as the program's factory returns them."""
        folder = os.path.abspath(program["dir"])
        path = os.path.abspath(os.path.join(folder, program["script"]))
        if not (path.startswith(folder + os.sep) and os.path.isfile(path)):
            raise JobError("retrace: the script %r is not in the program folder" % program["script"])
        factory_name = str(program.get("factory") or "make")
        sys.path.insert(0, os.path.dirname(path))
        try:
            made = self._run_factory(program["script"], path, factory_name)
        finally:
            if sys.path and sys.path[0] == os.path.dirname(path):
                sys.path.pop(0)
        if not (isinstance(made, tuple) and len(made) in (2, 3) and callable(made[0])):
            raise JobError("retrace: %s:%s() must return (fn, args) or (fn, args, kwargs)"
                           % (program["script"], factory_name))
        fn, args, kwargs = (made[0], made[1], {}) if len(made) == 2 else made
        if not isinstance(args, (tuple, list)):
            args = (args,)
        return fn, args, kwargs or {}

    def _run_factory(self, script, path, factory_name):
        """What the factory of the script at `path` returns (the script's folder is on sys.path meanwhile)."""
        import importlib.util

        import jax

        spec = importlib.util.spec_from_file_location("_reprobundle_program", path)
        if spec is None or spec.loader is None:
            raise JobError("cannot load the program %s" % path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["_reprobundle_program"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise JobError(self._failure("importing %s failed on jax %s" % (script, jax.__version__), e))
        factory = getattr(module, factory_name, None)
        if not callable(factory):
            raise JobError("retrace: %s has no function %s()" % (script, factory_name))
        try:
            return factory()
        except Exception as e:
            raise JobError(self._failure("%s:%s() failed on jax %s" % (script, factory_name, jax.__version__), e))

    def _failure(self, what, e):
        """`what: Error: message`, then the tail of the traceback (the user's frames are in it)."""
        tail = traceback.format_exception(type(e), e, e.__traceback__)
        lines = "".join(tail).rstrip().splitlines()[-TRACEBACK_LINES:]
        return "retrace: %s: %s\n%s" % (what, exc_msg(e), "\n".join(lines))

    def _check_leaves(self, call):
        """The factory's array leaves against the bundle's stored inputs: count, key paths, shapes, dtypes."""
        stored = self.job["inputs"]
        if len(call.dynamic) != len(stored):
            raise JobError("retrace: the factory's call has %d array leaves, the bundle stores %d inputs"
                           % (len(call.dynamic), len(stored)))
        for i, (leaf, named, (shape, dt), spec) in enumerate(zip(call.dynamic, call.input_leaves, self.input_meta,
                                                                   stored)):
            want = spec.get("key_path")
            if want is not None and want != named["path"]:
                raise JobError("retrace: input leaf %d is %s in the bundle but %s in the factory's call"
                               % (i, want, named["path"]))
            got_shape = tuple(int(d) for d in leaf.shape)
            got_dtype = dtype_name(leaf.dtype)
            if got_shape != tuple(shape) or got_dtype != dt.name:
                raise JobError("retrace: input leaf %d (%s): the bundle stores %s%s, the factory's call has %s%s"
                               % (i, named["path"], dt.name, list(shape), got_dtype, list(got_shape)))

    def _keep_stablehlo(self, exp):
        adir = self.job["artifacts_dir"]
        path = os.path.join(adir, "retraced.stablehlo.mlir")
        try:
            text = exp.mlir_module()
        except Exception as e:
            self.notes.append("could not print the retraced StableHLO: %s" % exc_msg(e))
            return
        with open(path, "w") as fh:
            fh.write(text)
        self.result["artifacts"]["stablehlo_retraced"] = path
