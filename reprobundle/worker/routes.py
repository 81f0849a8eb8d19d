"""The load routes: the first that loads, lowers and compiles the function on this release wins."""
from __future__ import annotations

import os
import sys
from typing import Any

from .dtypes import dtype_name
from .environment import out_of_memory
from .flatbuffer import exported_flatbuffer_info
from .kernels import (
    KERNEL_PREFIXES,
    custom_call_targets,
    jaxlib_lapack,
    missing_kernels_message,
    registered_targets,
    signature_message,
    signature_mismatches,
)
from .protocol import JobError, RouteFailure, exc_line, exc_msg, first_lines, read_bytes
from .rebuild import RebuildError, rebuild_exported
from .signature import SignatureError, main_signature
from .stablehlo import portable_artifact_version, text_to_artifact, version_tuple
from .state import WorkerState


class Routes(WorkerState):
    """The load routes: the first that loads, lowers and compiles the function on this release wins. Mixed into job.Worker."""

    def _file(self, key):
        function: Any = self.job["function"] or {}
        p = function.get(key)
        if not p:
            return None
        if not os.path.exists(p):
            raise RouteFailure("load", "the bundle's %s file %s does not exist" % (key, p))
        return p

    def route_deserialize(self):
        import jax

        path = self._file("exported")
        if path is None:
            raise RouteFailure("skipped", "bundle has no 'exported' (serialized Exported) file")
        data = read_bytes(path)
        try:
            self.import_export()
        except Exception as e:
            raise RouteFailure("load", "jax.export is unavailable: %s" % exc_msg(e))
        info = exported_flatbuffer_info(data)
        self.result["stablehlo"]["exported_flatbuffer"] = info
        who = "written by JAX %s" % info["jax_version"] if info.get("jax_version") else "writer JAX version not recorded"
        desc = "the Exported flatbuffer (serialization version %s, %s)" % (info.get("serialization_version"), who)
        try:
            from jax._src.export import serialization  # noqa: F401
        except ImportError as e:
            raise RouteFailure("load", "jax.export.deserialize unavailable: %s" % exc_msg(e))
        from jax import export as jexport

        try:
            exp = jexport.deserialize(bytearray(data))
        except Exception as e:
            msg = str(e)
            flag = "jax_export_deserialize_expired_versions"
            if ("backward-compatibility window" in msg or "expired" in msg.lower()) and hasattr(jax.config, flag):
                try:
                    jax.config.update(flag, True)
                    import warnings

                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        exp = jexport.deserialize(bytearray(data))
                    self.notes.append("deserialize: %s is outside jax %s's 6-month window; loaded it "
                                      "with the documented override %s=True"
                                      % (desc, jax.__version__, flag))
                except Exception as e2:
                    raise RouteFailure("load", "jax %s cannot deserialize %s: %s (retry with %s=True: %s)"
                                        % (jax.__version__, desc, exc_msg(e), flag, exc_msg(e2)))
            else:
                raise RouteFailure("load", "jax %s cannot deserialize %s: %s"
                                    % (jax.__version__, desc, exc_msg(e)))
        problem = self._sanity_check_exported(exp, info)
        if problem:
            raise RouteFailure("load", "jax %s misreads %s: %s" % (jax.__version__, desc, problem))
        desc = self._module_desc(exp.mlir_module_serialized, "the Exported's mlir_module_serialized")
        self.result["stablehlo"]["exported_module"] = desc["version"]
        return exp, desc

    def _sanity_check_exported(self, exp, info):
        """A flatbuffer from a newer schema can 'deserialize' into garbage. Compare with fields."""
        if exp.nr_devices < 1:
            extra = ""
            if info.get("nr_devices") and not info.get("nr_devices_short"):
                extra = (" (the flatbuffer stores nr_devices=%d in the 32-bit field of the newer schema, "
                         "which this JAX does not know)" % info["nr_devices"])
            return "decoded nr_devices=%s%s" % (exp.nr_devices, extra)
        f: Any = self.fields
        if not f:
            return None
        if "nr_devices" in f and int(f["nr_devices"]) != int(exp.nr_devices):
            return "decoded nr_devices=%s but the bundle fields say %s" % (exp.nr_devices, f["nr_devices"])
        for kind, avals in (("in_avals", exp.in_avals), ("out_avals", exp.out_avals)):
            want = f.get(kind)
            if want is None:
                continue
            def norm(shape):
                return [int(x) if isinstance(x, int) else str(x) for x in shape]

            got = [(norm(a.shape), dtype_name(a.dtype)) for a in avals]
            exp_l = [(norm(a["shape"]), str(a["dtype"])) for a in want]
            if got != exp_l:
                return "decoded %s %s but the bundle fields say %s" % (kind, got, exp_l)
        return None

    def _module_desc(self, data, what):
        ver = portable_artifact_version(data)
        return {"what": what, "version": ver}

    def _build_exported(self, mlir_bytes, route):
        """Rebuild an Exported from fields + a portable artifact."""
        _export = self.import_export()
        if not self.fields:
            raise RouteFailure("load", "bundle has no 'fields' to rebuild the Exported from")
        try:
            exp, notes = rebuild_exported(_export, self.fields, mlir_bytes)
        except RebuildError as e:
            raise RouteFailure("load", str(e))
        self.notes.extend("%s: %s" % (route, note) for note in notes)
        return exp

    def route_rebuild(self, key, route):
        path = self._file(key)
        if path is None:
            raise RouteFailure("skipped", "bundle has no '%s' file" % key)
        data = read_bytes(path)
        desc = self._module_desc(data, "the bundle's %s" % key)
        versions: Any = self.result["stablehlo"]  # key: "mlir_module" or "mlir_module_compat"
        versions[key] = desc["version"]
        return self._build_exported(data, route), desc

    def route_text(self):
        path = self._file("stablehlo_text")
        if path is None:
            raise RouteFailure("skipped", "bundle has no 'stablehlo_text' file")
        with open(path) as fh:
            text = fh.read()
        try:
            from jax._src.lib.mlir.dialects import hlo

            target = str(hlo.get_current_version())
        except Exception as e:
            raise RouteFailure("load", "cannot query StableHLO version: %s" % exc_msg(e))
        try:
            art = text_to_artifact(text, target)
        except Exception as e:
            raise RouteFailure("load", "cannot parse/serialize the StableHLO text with this jaxlib: %s"
                                % first_lines(str(e)))
        desc = {"what": "the bundle's stablehlo_text (serialized here at %s)" % target, "version": target}
        if not self.fields:
            self.fields = self._fields_from_text(text)
            self.notes.append("stablehlo-text: no fields in the bundle; derived in/out avals from @main")
            msg = self.check_inputs([(tuple(a["shape"]), a["dtype"]) for a in self.fields["in_avals"]],
                                    "the @main signature of the StableHLO text")
            if msg:
                raise JobError(msg)
        return self._build_exported(art, "stablehlo-text"), desc

    def _fields_from_text(self, text):
        try:
            signature = main_signature(text)
        except SignatureError as e:
            raise RouteFailure("load", "%s: %s" % (e, exc_line(e.cause)) if e.cause else str(e))
        ins, outs = signature["in_avals"], signature["out_avals"]
        if any(d is None for a in ins + outs for d in a["shape"]):
            raise RouteFailure("load", "@main has dynamic dimensions, which only the bundle's fields can name "
                                       "(the stablehlo-text route without fields needs static shapes)")
        # calling convention 9: what every jax from 0.4.30 reads
        return {"fun_name": "main", "in_avals": ins, "out_avals": outs, "nr_devices": signature["num_partitions"],
                "calling_convention_version": 9, "uses_global_constants": signature["uses_shape_polymorphism"]}

    def lower_and_compile(self, exp, route, desc):
        import time

        import jax

        avals = [(tuple(a.shape), dtype_name(a.dtype)) for a in exp.in_avals]
        msg = self.check_inputs(avals, "the %s route's Exported" % route)
        if msg:
            if self.fields:  # fields agreed with the inputs: the route produced something inconsistent
                raise RouteFailure("load", "inconsistent Exported: " + msg)
            raise JobError(msg)
        in_tree = exp.in_tree
        call = exp.call

        def replay(*flat):
            args, kwargs = jax.tree_util.tree_unflatten(in_tree, list(flat))
            return call(*args, **kwargs)

        safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(exp.fun_name))[:60]
        replay.__name__ = "replay_" + (safe or "fun")
        replay.__qualname__ = replay.__name__
        if not hasattr(self, "dev_inputs"):
            self.dev_inputs = [jax.device_put(a) for a in self.host_inputs]
            jax.block_until_ready(self.dev_inputs)
            self.host_inputs = None  # type: ignore[assignment]  # free host memory (inputs can be large)
        fn = jax.jit(replay)
        try:
            lowered = fn.lower(*self.dev_inputs)
        except Exception as e:
            raise RouteFailure("lower", self._explain_module_failure(e, desc))
        self.prepare_kernels(lowered, exp)
        t0 = time.perf_counter()
        compiled = self.compile_lowered(lowered, route)
        return lowered, compiled, time.perf_counter() - t0

    def compile_lowered(self, lowered, route):
        """XLA's compile of `lowered`, with the job's compile options (XLA DebugOptions fields) when it has some."""
        options: Any = self.job.get("compile_options")  # (jax's stub says str|bool values; XLA takes ints too)
        try:
            return lowered.compile(dict(options)) if options else lowered.compile()
        except Exception as e:
            if out_of_memory(e):  # the release compiled it, the device could not hold it: not incompatible
                raise JobError("out of device memory while compiling (route %r): %s" % (route, exc_msg(e)))
            if options:  # the contender's options, not the module: no other route would compile it either
                raise JobError("XLA did not compile with the options %s: %s" % (
                    ", ".join("%s=%s" % kv for kv in sorted(options.items())), exc_msg(e)))
            raise RouteFailure("compile", "XLA compilation failed: %s" % exc_msg(e))

    def _check_kernel_signatures(self, lowered, kernels):
        """Fail the route, naming them, when kernels the module calls take other operands on this release (the
        call would fail at run time with "Wrong number of arguments"); judged once per job."""
        cache = self.__dict__.setdefault("_kernel_signatures", {})
        key = tuple(kernels)
        if key not in cache:
            try:
                cache[key] = signature_mismatches(lowered.as_text(), kernels)
            except Exception as e:
                self.notes.append("could not compare kernel signatures: %s" % exc_msg(e))
                cache[key] = []
        if cache[key]:
            raise RouteFailure("compile", signature_message(cache[key]))

    def prepare_kernels(self, lowered, exp):
        """Make the jaxlib CPU kernels (LAPACK, BLAS) that the module calls usable in this process, or fail
        the route naming those this jaxlib lacks (XLA would only say so at the call, or not at all).

        jax registers jaxlib's kernels as custom-call targets when it is imported, but the LAPACK ones work
        only after ``jaxlib.cpu._lapack.initialize()`` (it takes their function pointers from scipy's
        LAPACK), which jax 0.4.30 .. 0.9 calls only while lowering a linalg op itself (``prepare_lapack_call``
        and the ``*_hlo`` builders), never in a replay: the call then dies by SIGSEGV.  jax >= 0.10 does it
        when it lowers the call of an Exported.  jaxlib 0.4.30 also registers its one typed-FFI kernel
        (``lapack_?potrf_ffi``) under the untyped custom-call API, where a typed-FFI call cannot find it.
        """
        kernels = self._cpu_kernels(lowered, exp)
        if not kernels:
            return
        lapack = jaxlib_lapack()
        try:
            provided = dict(lapack.registrations()) if lapack is not None else {}
        except Exception:
            provided = {}
        registered = registered_targets()
        missing = [t for t in kernels if t not in provided and t not in registered]
        if missing:
            raise RouteFailure("compile", missing_kernels_message(missing, provided))
        self._check_kernel_signatures(lowered, kernels)
        done = self.__dict__.setdefault("_prepared_kernels", set())  # by an earlier route of this job
        new = [t for t in kernels if t not in done]
        done.update(kernels)
        if not new:
            return
        self._register_typed_ffi(new, provided, registered)
        init = getattr(lapack, "initialize", None)
        if init is None:
            return
        try:
            init()
        except Exception as e:
            done.difference_update(new)
            raise RouteFailure("compile", "cannot initialize jaxlib's CPU LAPACK kernels, which the module's "
                                "custom calls %s need (calling them uninitialized would crash): %s"
                                % (", ".join(kernels), exc_msg(e)))
        export_mod = sys.modules.get("jax._src.export._export")
        if not hasattr(export_mod, "_ensure_backends_initialized"):  # else jax's own lowering of the call did it
            self.notes.append("initialized jaxlib's CPU LAPACK kernels (jaxlib.cpu._lapack.initialize) for the "
                              "custom calls %s: this jax does so only when it lowers a linalg op itself, and "
                              "without it the call would crash" % ", ".join(new))

    @staticmethod
    def _cpu_kernels(lowered, exp):
        """The jaxlib CPU kernels (LAPACK, BLAS) the module calls, sorted; none off the CPU."""
        import jax

        if jax.default_backend() != "cpu":
            return []
        data = bytes(exp.mlir_module_serialized)
        if not any(p.encode() in data for p in KERNEL_PREFIXES):  # cheap: bytecode keeps strings as they are
            return []
        try:
            targets = custom_call_targets(lowered.as_text())
        except Exception:
            import re

            targets = set(re.findall(r"(?:%s)[A-Za-z0-9_]+" % "|".join(KERNEL_PREFIXES), data.decode("latin-1")))
        return sorted(t for t in targets if t.startswith(KERNEL_PREFIXES))

    def _register_typed_ffi(self, new, provided, registered):
        # An *_ffi kernel listed with a bare capsule is registered under the untyped API (jaxlib 0.4.30):
        # register it again as a typed-FFI handler, which is what the module's custom call looks up.
        for t in new:
            if t.endswith("_ffi") and t in provided and t in registered and not isinstance(registered[t], dict):
                try:
                    from jax._src.lib import xla_client

                    xla_client.register_custom_call_target(t, provided[t], platform="cpu", api_version=1)
                    self.notes.append("registered jaxlib's %s as a typed-FFI custom-call target (this jaxlib "
                                      "registers it only under the untyped API, where the module's typed-FFI "
                                      "call cannot find it)" % t)
                except Exception as e:
                    self.notes.append("could not register %s as a typed-FFI custom-call target: %s"
                                      % (t, exc_msg(e)))

    def _explain_module_failure(self, e, desc):
        msg = exc_msg(e)
        ver = desc.get("version") if desc else None
        info: Any = self.result["stablehlo"].get("jaxlib") or {}
        cur = info.get("current")
        try:
            import jaxlib.version

            jl = jaxlib.version.__version__
        except Exception:
            jl = "?"
        if ver and cur and ("StableHLO" in msg or "deserialize" in msg.lower() or "VHLO" in msg
                            or "bytecode" in msg.lower() or "attribute code" in msg):
            if version_tuple(ver) > version_tuple(cur):
                return ("%s was written at StableHLO %s and jaxlib %s reads up to %s: %s"
                        % (desc["what"], ver, jl, cur, msg))
            return ("%s (StableHLO %s, within jaxlib %s's window [%s..%s]) failed to load: %s"
                    % (desc["what"], ver, jl, info.get("minimum"), cur, msg))
        return "lowering the call failed: %s" % msg
