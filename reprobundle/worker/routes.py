"""The load routes: the first that loads, lowers and compiles the function on this release wins."""
from __future__ import annotations

import os
import sys

from .describe import shape_builder
from .dtypes import dtype_name, dtype_of_mlir_element, np_dtype
from .environment import lowering_platform, out_of_memory
from .flatbuffer import exported_flatbuffer_info
from .kernels import (
    KERNEL_PREFIXES,
    custom_call_targets,
    jaxlib_lapack,
    missing_kernels_message,
    registered_targets,
)
from .protocol import JobError, RouteFailure, exc_msg, first_lines, read_bytes
from .stablehlo import (
    portable_artifact_version,
    strip_mlir_locations,
    text_to_artifact,
    version_tuple,
)


class Routes(object):
    """The load routes: the first that loads, lowers and compiles the function on this release wins. Mixed into job.Worker."""

    def _file(self, key):
        p = (self.job["function"] or {}).get(key)
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
        f = self.fields
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
        import dataclasses

        import jax
        from jax._src import core as jcore

        _export = self.import_export()
        f = self.fields
        if not f:
            raise RouteFailure("load", "bundle has no 'fields' to rebuild the Exported from")
        try:
            shape_of = shape_builder(f["in_avals"] + f["out_avals"])
            in_avals = tuple(jcore.ShapedArray(shape_of(a["shape"]), np_dtype(a["dtype"])) for a in f["in_avals"])
            out_avals = tuple(jcore.ShapedArray(shape_of(a["shape"]), np_dtype(a["dtype"])) for a in f["out_avals"])
        except Exception as e:
            raise RouteFailure("load", "cannot build avals from fields: %s" % exc_msg(e))
        nr_devices = int(f.get("nr_devices", 1))
        for kind in ("ordered_effects", "unordered_effects"):
            if f.get(kind):
                raise RouteFailure("load", "the function has %s %s, which cannot be reconstructed from "
                                    "text fields (needs the deserialize route)" % (kind, f[kind]))
        in_sh = list(f.get("in_shardings_hlo") or [None] * len(in_avals))
        out_sh = list(f.get("out_shardings_hlo") or [None] * len(out_avals))
        nontrivial = [s for s in in_sh + out_sh if s is not None]
        if nontrivial:
            if nr_devices > 1:
                raise RouteFailure("load", "multi-device shardings %s cannot be rebuilt from text fields "
                                    "(needs the deserialize route)" % nontrivial[:3])
            self.notes.append("%s: ignored shardings %s (nr_devices=1, so they are trivial)"
                              % (route, sorted(set(nontrivial))[:3]))
        in_sh = [None] * len(in_avals)
        out_sh = [None] * len(out_avals)
        checks = []
        for c in f.get("disabled_safety_checks") or []:
            s = str(c)
            if "custom_call:" in s:
                target = s.split("custom_call:", 1)[1].rstrip(")'\" ")
                checks.append(_export.DisabledSafetyCheck.custom_call(target))
            elif "shape_assertions" in s:
                checks.append(_export.DisabledSafetyCheck.shape_assertions())
            elif "platform" in s:
                checks.append(_export.DisabledSafetyCheck.platform())
            else:
                raise RouteFailure("load", "unknown disabled safety check %r" % s)
        cc = int(f.get("calling_convention_version", _export.maximum_supported_calling_convention_version))
        cc = self._adjust_cc(cc, _export, route)
        n_in = len(in_avals)
        values = {
            "fun_name": str(f.get("fun_name", "fun")),
            "in_tree": jax.tree_util.tree_structure((tuple(range(n_in)), {})),
            "in_avals": in_avals,
            "out_tree": jax.tree_util.tree_structure(tuple(range(len(out_avals)))),
            "out_avals": out_avals,
            "_has_named_shardings": False,
            "_in_named_shardings": tuple(in_sh),
            "_out_named_shardings": tuple(out_sh),
            "in_shardings_hlo": tuple(in_sh),
            "out_shardings_hlo": tuple(out_sh),
            "nr_devices": nr_devices,
            "platforms": tuple(str(p).lower() for p in (f.get("platforms") or [lowering_platform()])),
            "ordered_effects": (),
            "unordered_effects": (),
            "disabled_safety_checks": tuple(checks),
            "mlir_module_serialized": bytes(mlir_bytes),
            "calling_convention_version": cc,
            "module_kept_var_idx": tuple(int(i) for i in f.get("module_kept_var_idx", range(n_in))),
            "uses_global_constants": bool(f.get("uses_global_constants", False)),
            "_get_vjp": None,
        }
        kwargs = {}
        for fld in dataclasses.fields(_export.Exported):
            if fld.name in values:
                kwargs[fld.name] = values[fld.name]
            elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                raise RouteFailure("load", "jax %s's Exported has a field %r this worker cannot fill"
                                    % (jax.__version__, fld.name))
        try:
            return _export.Exported(**kwargs)
        except Exception as e:
            raise RouteFailure("load", "cannot construct Exported: %s" % exc_msg(e))

    def _adjust_cc(self, cc, _export, route):
        lo = _export.minimum_supported_calling_convention_version
        hi = _export.maximum_supported_calling_convention_version
        if lo <= cc <= hi:
            return cc
        if cc == 10 and hi == 9:
            # Version 10 only adds propagation of jax_use_shardy_partitioner to
            # tf.XlaCallModule; the module and JAX-native calling convention are
            # identical to version 9.
            self.notes.append("%s: calling_convention_version 10 is above this jax's supported range "
                              "[%d..%d]; used 9 (10 differs only by propagating use_shardy_partitioner to "
                              "tf.XlaCallModule, the module calling convention is the same)" % (route, lo, hi))
            return 9
        self.notes.append("%s: calling_convention_version %d is outside this jax's supported range [%d..%d]; "
                          "kept it unchanged (no known-sound adjustment)" % (route, cc, lo, hi))
        return cc

    def route_rebuild(self, key, route):
        path = self._file(key)
        if path is None:
            raise RouteFailure("skipped", "bundle has no '%s' file" % key)
        data = read_bytes(path)
        desc = self._module_desc(data, "the bundle's %s" % key)
        self.result["stablehlo"][key] = desc["version"]
        return self._build_exported(data, route), desc

    def route_text(self):
        path = self._file("stablehlo_text")
        if path is None:
            raise RouteFailure("skipped", "bundle has no 'stablehlo_text' file")
        with open(path, "r") as fh:
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
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir

        def conv(t):
            rt = ir.RankedTensorType(t)
            et = str(rt.element_type)
            return {"shape": [int(d) for d in rt.shape], "dtype": dtype_of_mlir_element(et)}

        last = None
        for candidate in (text, strip_mlir_locations(text)):
            try:
                with mlir.make_ir_context():
                    mod = ir.Module.parse(candidate)
                    main = None
                    for op in mod.body.operations:
                        try:
                            if ir.StringAttr(op.attributes["sym_name"]).value == "main":
                                main = op
                        except Exception:
                            continue
                    if main is None:
                        raise RouteFailure("load", "the StableHLO text has no @main function")
                    ft = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
                    ins = [conv(t) for t in ft.inputs]
                    outs = [conv(t) for t in ft.results]
                    try:
                        poly = str(mod.operation.attributes["jax.uses_shape_polymorphism"]) == "true"
                    except Exception:
                        poly = False
                    try:
                        nparts = int(str(mod.operation.attributes["mhlo.num_partitions"]).split(":")[0])
                    except Exception:
                        nparts = 1
                break
            except RouteFailure:
                raise
            except Exception as e:
                last = e
        else:
            raise RouteFailure("load", "cannot derive the signature of @main: %s" % exc_msg(last))
        return {"fun_name": "main", "in_avals": ins, "out_avals": outs,
                "platforms": [lowering_platform()], "nr_devices": nparts,
                "in_shardings_hlo": [None] * len(ins), "out_shardings_hlo": [None] * len(outs),
                "calling_convention_version": 9, "ordered_effects": [], "unordered_effects": [],
                "disabled_safety_checks": [], "module_kept_var_idx": list(range(len(ins))),
                "uses_global_constants": poly}

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
            self.host_inputs = None  # free host memory (inputs can be large)
        fn = jax.jit(replay)
        try:
            lowered = fn.lower(*self.dev_inputs)
        except Exception as e:
            raise RouteFailure("lower", self._explain_module_failure(e, desc))
        self.prepare_kernels(lowered, exp)
        t0 = time.perf_counter()
        try:
            compiled = lowered.compile()
        except Exception as e:
            if out_of_memory(e):  # the release compiled it, the device could not hold it: not incompatible
                raise JobError("out of device memory while compiling (route %r): %s" % (route, exc_msg(e)))
            raise RouteFailure("compile", "XLA compilation failed: %s" % exc_msg(e))
        compile_s = time.perf_counter() - t0
        return lowered, compiled, compile_s

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
        import jax

        if jax.default_backend() != "cpu":
            return
        data = bytes(exp.mlir_module_serialized)
        if not any(p.encode() in data for p in KERNEL_PREFIXES):  # cheap: bytecode keeps strings as they are
            return
        try:
            targets = custom_call_targets(lowered.as_text())
        except Exception:
            import re

            targets = set(re.findall(r"(?:%s)[A-Za-z0-9_]+" % "|".join(KERNEL_PREFIXES), data.decode("latin-1")))
        kernels = sorted(t for t in targets if t.startswith(KERNEL_PREFIXES))
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
        done = self.__dict__.setdefault("_prepared_kernels", set())  # by an earlier route of this job
        new = [t for t in kernels if t not in done]
        done.update(kernels)
        if not new:
            return
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

    def _explain_module_failure(self, e, desc):
        msg = exc_msg(e)
        ver = desc.get("version") if desc else None
        info = self.result["stablehlo"].get("jaxlib") or {}
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
