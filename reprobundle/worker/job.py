"""One job: inputs, jax setup, the route loop, outputs and artifacts, in the order the protocol gives."""
from __future__ import annotations

import os
import sys
from typing import Any

from .describe import describe_tree, exported_fields
from .dtypes import WIDE_64, np_dtype
from .environment import (
    base_environment,
    device_environment,
    device_memory,
    env_vars,
    jax_environment,
    out_of_memory,
)
from .memory import check_inputs_fit, check_module_fits, check_room_for_jax
from .process_state import process_conditions
from .protocol import (
    PROTOCOL_VERSION,
    ROUTES,
    STAGE_RANK,
    STATUS_ERROR,
    STATUS_INCOMPATIBLE,
    STATUS_OK,
    JobError,
    RouteFailure,
    exc_msg,
    first_lines,
    is_no_space,
    write_msgpack,
)
from .records import Attempt, OutputLeaf
from .retrace import RETRACE_ROUTE, Retrace
from .routes import Routes
from .settings import apply_config, apply_environment
from .stablehlo import serialize_compat_artifact, stablehlo_versions, version_tuple
from .synthetic import synthetic_array
from .timing import TimedCalls
from .trace import Profiling


class Worker(Routes, Retrace, TimedCalls, Profiling):
    """The state of one job; each phase checkpoints so a crash still names it."""

    def __init__(self, job, result_path=None, control=None, shared=None):
        self.job = job
        self.result_path = result_path
        self.control = control
        self.shared = shared  # shared.SharedProcess: one of several jobs of one process (None: the process's only)
        self.notes = []
        self.attempts = []
        self.result = {
            "protocol": PROTOCOL_VERSION, "status": STATUS_ERROR, "reason": "", "route": None,
            "attempts": self.attempts, "notes": self.notes, "environment": {}, "stablehlo": {},
            "compile_s": None, "samples_ns": [], "outputs": [], "artifacts": {}, "per_op": [],
            "profile": None, "phase_s": {},
        }
        self.phase = "start"
        self.no_space = False  # it met a full disk: the process exits with EXIT_NO_SPACE

    def checkpoint(self, phase):
        import time

        self.phase = phase
        self._phase_t0 = time.perf_counter()
        if self.result_path:
            prov = dict(self.result)
            prov["status"] = STATUS_ERROR
            prov["reason"] = "worker process ended abnormally during phase %r (crash, kill or timeout)" % phase
            prov["phase"] = phase  # only provisional results name a phase: the host's crash record reports it
            try:
                write_msgpack(self.result_path, prov)
            except Exception as e:
                if is_no_space(e):
                    self.no_space = True

    def end_phase(self):
        import time

        t0 = getattr(self, "_phase_t0", None)
        if t0 is not None:
            self.result["phase_s"][self.phase] = round(time.perf_counter() - t0, 6)
            self._phase_t0 = None  # type: ignore[assignment]

    def validate(self):
        job = self.job
        if not isinstance(job, dict):
            raise JobError("job is not a map")
        proto = job.get("protocol")
        if proto != PROTOCOL_VERSION:
            raise JobError("unsupported job protocol %r (this worker speaks %d)" % (proto, PROTOCOL_VERSION))
        fn = job.get("function")
        if not isinstance(fn, dict):
            raise JobError("job.function missing or not a map")
        if not isinstance(job.get("inputs"), list):
            raise JobError("job.inputs missing or not a list")
        for k in ("outputs_dir", "artifacts_dir"):
            if not isinstance(job.get(k), str) or not job.get(k):
                raise JobError("job.%s missing" % k)
        routes = job.get("routes")
        if routes is not None:
            bad = [r for r in routes if r not in ROUTES]
            if bad:
                raise JobError("unknown route(s) %s; known: %s" % (bad, list(ROUTES)))
        self.fields = fn.get("fields") or None

    def declared_inputs(self):
        """(shape, dtype, elements) of each input leaf as the job declares it, checked before anything is allocated."""
        declared = []
        for i, leaf in enumerate(self.job["inputs"]):
            if not isinstance(leaf, dict):
                raise JobError("input leaf %d is not a map" % i)
            try:
                shape = tuple(int(d) for d in leaf["shape"])
                dt = np_dtype(leaf["dtype"])
            except Exception as e:
                raise JobError("input leaf %d: bad shape/dtype (%s)" % (i, exc_msg(e)))
            if any(d < 0 for d in shape):
                raise JobError("input leaf %d: negative dimension in %s%s" % (i, dt.name, list(shape)))
            n = 1
            for d in shape:
                n *= d
            declared.append((shape, dt, n))
        return declared

    def load_inputs(self):
        import numpy as np

        declared = self.declared_inputs()
        if self.job.get("memory_check", True):  # before any input is allocated: what they declare must fit
            check_inputs_fit(sum(n * dt.itemsize for _, dt, n in declared))
        arrays = []
        for i, leaf in enumerate(self.job["inputs"]):
            shape, dt, n = declared[i]
            if leaf.get("path"):
                path = leaf["path"]
                want = n * dt.itemsize
                try:
                    size = os.path.getsize(path)
                except OSError as e:
                    raise JobError("input leaf %d: cannot read %s (%s)" % (i, path, e))
                if size != want:
                    raise JobError("input leaf %d: file %s has %d bytes, expected %d for %s%s"
                                    % (i, path, size, want, dt.name, list(shape)))
                arr = np.fromfile(path, dtype=dt, count=n).reshape(shape)
            elif leaf.get("synthetic") is not None:
                try:
                    arr = synthetic_array(shape, dt, leaf["synthetic"])
                except Exception as e:
                    raise JobError("input leaf %d: synthetic generation failed (%s)" % (i, exc_msg(e)))
            else:
                raise JobError("input leaf %d has neither 'path' nor 'synthetic'" % i)
            arrays.append(arr)
        self.host_inputs = arrays
        self.input_meta = [(tuple(a.shape), a.dtype) for a in arrays]

    def adopt_raw_inputs(self, avals, what):
        """Raw-byte input leaves (void dtype: ml_dtypes arrays as numpy.savez stores them) take the dtype of
        the function's aval when the item sizes agree, as the host does for the manifest."""
        if getattr(self, "host_inputs", None) is None or len(avals) != len(self.host_inputs):
            return
        import numpy as np

        for i, ((_, dt), arr) in enumerate(zip(avals, self.host_inputs)):
            if arr.dtype.type is not np.void or arr.dtype.names is not None:  # ml_dtypes types are kind "V" too
                continue
            try:
                want = np_dtype(dt)
            except Exception:
                continue
            if want.type is not np.void and want.itemsize == arr.dtype.itemsize:
                self.host_inputs[i] = arr.view(want)
                self.input_meta[i] = (tuple(arr.shape), want)
                self.notes.append("input leaf %d: raw %s data taken as %s (from %s)"
                                  % (i, arr.dtype.name, want.name, what))

    def check_inputs(self, avals, what):
        """avals: list of (shape tuple, dtype name). Returns error message or None."""
        self.adopt_raw_inputs(avals, what)
        metas = self.input_meta
        if len(avals) != len(metas):
            return ("the function (%s) takes %d input leaves but the job has %d"
                    % (what, len(avals), len(metas)))
        for i, ((shape, dt), (act_shape, act_dt)) in enumerate(zip(avals, metas)):
            exp_shape = list(shape)
            act_shape = list(act_shape)
            shape_ok = len(exp_shape) == len(act_shape) and all(
                (not isinstance(e, int)) or e == x for e, x in zip(exp_shape, act_shape))
            try:
                dt_ok = np_dtype(dt) == act_dt
            except Exception:
                dt_ok = str(dt) == act_dt.name
            if not (shape_ok and dt_ok):
                return ("input leaf %d: expected %s%s (from %s), got %s%s"
                        % (i, dt, [e if isinstance(e, int) else str(e) for e in exp_shape], what,
                           act_dt.name, act_shape))
        return None

    def setup_jax(self):
        job = self.job
        adir = job["artifacts_dir"]
        os.makedirs(adir, exist_ok=True)
        os.makedirs(job["outputs_dir"], exist_ok=True)
        if job.get("dump"):
            ddir = os.path.join(adir, "xla_dump")
            os.makedirs(ddir, exist_ok=True)
            self.result["artifacts"]["xla_dump"] = ddir
        if self.shared is not None and self.shared.user_flags is not None:
            # a later job of a shared process: jax runs as the first job set it up, and says so in each job's notes
            user_flags = self.shared.user_flags
            self.notes.extend(self.shared.setup_notes)
        else:
            noted = len(self.notes)
            user_flags = self.set_flags_before_jax()
            if self.shared is not None:
                self.shared.setup_notes = self.notes[noted:]
        import jax  # noqa: F401  (first import of jax happens here)

        env = self.result["environment"]
        jax_environment(env)
        env["env_vars"] = env_vars()
        if job.get("dump"):  # record the user's flags, not the worker's own dump flags
            if user_flags:
                env["env_vars"]["XLA_FLAGS"] = user_flags
            else:
                env["env_vars"].pop("XLA_FLAGS", None)
        if env.get("platform") is None:
            raise self._no_backend(job.get("platform"), env.get("backend_error"))
        device_environment(env)
        if job.get("platform") and env.get("platform") != job["platform"]:
            raise JobError("asked to run on %s, but jax runs on %s (%s)"
                           % (job["platform"], env.get("platform"), env.get("device_kind")))
        try:
            self.result["stablehlo"]["jaxlib"] = stablehlo_versions()
        except Exception as e:
            self.result["stablehlo"]["jaxlib_error"] = exc_msg(e)
        self._enable_x64_if_needed()
        apply_config(job, self.notes)  # the contender's options, after the worker's own (they may override it)

    def set_flags_before_jax(self):
        """The environment the job's settings ask for and the dump's flags, set before jax is imported; the
        user's and the contender's XLA_FLAGS (what the environment records)."""
        job = self.job
        # the user's flags, then the worker's dump flags, then the contender's (later flags win in XLA)
        given = os.environ.get("XLA_FLAGS", "").strip()
        contender_flags = apply_environment(job, self.notes)
        user_flags = (given + " " + contender_flags).strip()
        extra = ""
        if job.get("dump"):
            # a shared process dumps into its own folder, and each job takes what its commands added (shared.py)
            ddir = self.shared.dump_dir if self.shared is not None else self.result["artifacts"]["xla_dump"]
            os.makedirs(ddir, exist_ok=True)
            extra = "--xla_dump_to=%s --xla_dump_hlo_as_text" % ddir
            if "jax" in sys.modules:
                self.notes.append("jax was already imported before the worker set XLA_FLAGS; dump may be missing")
        if extra or contender_flags:
            os.environ["XLA_FLAGS"] = " ".join(f for f in (given, extra, contender_flags) if f)
        self.select_platform()
        if self.shared is not None:
            self.shared.user_flags = user_flags
        return user_flags

    def _enable_x64_if_needed(self):
        import jax

        # 64-bit inputs need x64 mode, otherwise jax silently truncates them.
        wide = [m for m in self.input_meta if m[1].name in WIDE_64]
        if self.fields:
            wide += [a for a in self.fields.get("out_avals") or [] if str(a.get("dtype")) in WIDE_64]
        if wide:
            jax.config.update("jax_enable_x64", True)
            self.notes.append("enabled jax_enable_x64 because the function has 64-bit inputs/outputs")

    @staticmethod
    def _no_backend(want, why):
        """The error when jax initialised no backend: says which plugin package is missing when that is why."""
        plugins = ("jax-cuda", "jax_cuda") if want == "cuda" else ("jax-rocm", "jax_rocm") if want == "rocm" \
            else ("libtpu",) if want == "tpu" else ()
        try:
            from importlib import metadata

            packages = [str(d.metadata["Name"] or "") for d in metadata.distributions()]
        except Exception:
            packages = None  # unknown: say nothing about plugins
        if plugins and packages is not None and not any(k.lower().startswith(plugins) for k in packages):
            why = "this Python's jax has no %s support installed (no %s* package); %s" % (want, plugins[0], why)
        return JobError("no JAX backend could be initialised%s: %s"
                        % (" for the platform %r" % want if want else "", why))

    def select_platform(self):
        """Before jax is imported: run on the job's platform (JAX_PLATFORMS), and on a GPU allocate device memory
        as needed instead of grabbing 75% of it at start, so that the workers of several versions, alive together
        while they are timed in alternation, each get what they use."""
        want = self.job.get("platform")
        if not want:
            return
        os.environ["JAX_PLATFORMS"] = str(want)
        if want in ("cuda", "rocm") and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
            os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            self.notes.append("set XLA_PYTHON_CLIENT_PREALLOCATE=false: the workers of the versions timed together "
                              "share the device, so each allocates what it uses")

    def import_export(self):
        """Import jax's export machinery (with a logging shim for jax 0.4.30 without absl)."""
        try:
            from jax._src.export import _export  # noqa: F401
        except ImportError as e:
            if "absl" not in str(e):
                raise
            import logging
            import types

            log = logging.getLogger("absl")
            absl: Any = types.ModuleType("absl")
            absl.__path__ = []
            alog: Any = types.ModuleType("absl.logging")
            alog.vlog_is_on = lambda level: False
            for name in ("info", "warning", "error", "debug", "log", "exception"):
                setattr(alog, name, getattr(log, name) if name != "log" else log.log)
            alog.vlog = lambda level, msg, *args: None
            absl.logging = alog
            sys.modules.setdefault("absl", absl)
            sys.modules.setdefault("absl.logging", alog)
            try:
                from jax._src.export import _export  # noqa: F401
            finally:
                if sys.modules.get("absl") is absl:
                    del sys.modules["absl"]
                if sys.modules.get("absl.logging") is alog:
                    del sys.modules["absl.logging"]
            self.notes.append("absl-py is not installed (an undeclared dependency of this jax's "
                              "jax.export); provided a stdlib-logging stand-in for absl.logging")
        from jax._src.export import _export

        return _export

    def run(self):
        loaded = self.until_timing()
        if loaded is None:
            return self.result
        route, compiled = loaded
        failure = self.timed(compiled)
        if failure:
            return self.failed(failure)
        return self.after_timed(route, compiled)

    def failed(self, reason):
        self.result["status"] = STATUS_ERROR
        self.result["reason"] = reason
        return self.result

    def after_timed(self, route, compiled):
        """The rest of a job whose timed calls ran: the profile and the process's state; the result, final."""
        self.after_timing(compiled)
        self.result["status"] = STATUS_OK
        self.result["reason"] = self._replayed_reason(route)
        return self.result

    def until_timing(self):
        """Everything before the timed calls: (route, compiled) ready to time, or None when the result is final
        (incompatible, or its first call failed)."""
        res = self.result
        self.prepare()
        loaded = self.load_function()
        if loaded is None:
            res["status"] = STATUS_INCOMPATIBLE
            res["reason"] = self._incompatible_reason()
            return None
        route, exp, lowered, compiled = loaded
        if self.shared is not None:
            self.shared.collect_dump(self)
        if self.job.get("memory_check", True):
            self.checkpoint("memory_check")
            skipped = check_module_fits(compiled, self.result["environment"].get("platform"))
            if skipped:
                self.notes.append(skipped)
            self.end_phase()
        if self.job.get("describe"):
            self.checkpoint("describe")
            res["description"] = self.describe(exp)
            self.end_phase()

        self.checkpoint("hlo_text")
        self.write_hlo(lowered, compiled)
        self.end_phase()

        failure = self.execute(compiled, route)
        if failure:
            self.failed(failure)
            return None
        return route, compiled

    def prepare(self):
        """Validate the job, load its inputs, import jax on the job's platform."""
        self.checkpoint("validate")
        self.validate()
        self.result["environment"] = base_environment(packages=not self.job.get("brief_environment"))
        self.end_phase()

        self.checkpoint("inputs")
        self.load_inputs()
        if self.fields and self.fields.get("in_avals") is not None:
            avals = [(tuple(a["shape"]), a["dtype"]) for a in self.fields["in_avals"]]
            msg = self.check_inputs(avals, "bundle fields in_avals")
            if msg:
                raise JobError(msg)
        self.end_phase()

        self.checkpoint("import_jax")
        check_room_for_jax()
        self.setup_jax()
        self.end_phase()

    def load_function(self):
        """(route, exported, lowered, compiled) by the first route that loads and compiles (the others' failures
        in self.attempts); None when none does. A retrace job has one route: the program traced here."""
        handlers = {
            RETRACE_ROUTE: self.route_retrace,
            "deserialize": self.route_deserialize,
            "rebuild": lambda: self.route_rebuild("mlir_module", "rebuild"),
            "rebuild-compat": lambda: self.route_rebuild("mlir_module_compat", "rebuild-compat"),
            "stablehlo-text": self.route_text,
        }
        retrace = self.job.get("mode") == "retrace"
        for route in [RETRACE_ROUTE] if retrace else list(self.job.get("routes") or ROUTES):
            self.checkpoint("route:" + route)
            try:
                exp, desc = handlers[route]()
                lowered, compiled, compile_s = self.lower_and_compile(exp, route, desc)
            except RouteFailure as rf:
                entry: Attempt = {"route": route, "error": rf.message, "stage": rf.stage}
                if rf.stage == "skipped":
                    entry["skipped"] = True
                self.attempts.append(entry)
                self.end_phase()
                continue
            self.end_phase()
            self.record_loaded(route, exp, desc, compile_s)
            return route, exp, lowered, compiled
        return None

    def record_loaded(self, route, exp, desc, compile_s):
        res = self.result
        res["route"] = route
        ver = desc.get("version") if desc else None
        jaxlib = res["stablehlo"].get("jaxlib")
        cur = jaxlib.get("current") if jaxlib else None
        if ver and cur and version_tuple(ver) > version_tuple(cur):
            self.notes.append("%s: %s declares StableHLO %s, newer than this jaxlib's %s, but every VHLO op and "
                              "attribute in it is known here, so it deserialized (VHLO versions ops whose "
                              "semantics change, so this is sound)" % (route, desc["what"], ver, cur))
        res["compile_s"] = compile_s
        res["function"] = {"fun_name": str(exp.fun_name), "nr_devices": int(exp.nr_devices),
                           "platforms": list(exp.platforms),
                           "calling_convention_version": int(exp.calling_convention_version)}

    def execute(self, compiled, route):
        """Run the function once and write its outputs; the reason it failed, or None."""
        self.checkpoint("execute")
        try:
            out = compiled(*self.dev_inputs)
            import jax

            jax.block_until_ready(out)
            self.write_outputs(out)
            del out
        except JobError:
            raise
        except Exception as e:
            return "execution failed after loading via route %r: %s%s" % (
                route, "out of device memory: " if out_of_memory(e) else "", exc_msg(e))
        self.end_phase()
        return None

    def timed(self, compiled):
        """The timed calls (served step by step in lockstep, else warmup + repeat); the reason they failed, or
        None."""
        self.checkpoint("timing")
        timing: Any = self.job.get("timing") or {}
        warmup = int(timing.get("warmup", 1))
        repeat = int(timing.get("repeat", 5))
        try:
            if self.control is not None:
                self.result["samples_ns"] = self.serve_timed_calls(compiled, warmup)
            else:
                self.result["samples_ns"] = self.time_calls(compiled, warmup, repeat)
        except Exception as e:
            return self.timing_failure(e)
        self.end_phase()
        return None

    @staticmethod
    def timing_failure(e):
        return "timed execution failed: %s%s" % ("out of device memory: " if out_of_memory(e) else "", exc_msg(e))

    def after_timing(self, compiled):
        """The process's conditions, device memory, the profile and the dump's check, after the timed calls."""
        res = self.result
        # after the timed calls: the threads XLA and its libraries started are running now
        res["environment"]["process"] = process_conditions()
        memory = device_memory()
        if memory:
            res["environment"]["device_memory"] = memory

        if self.job.get("profile"):
            self.checkpoint("profile")
            try:
                self.profile(compiled)
            except Exception as e:
                res["profile"] = {"note": "profiling failed: %s" % exc_msg(e)}
                self.notes.append("profiling failed: %s" % exc_msg(e))
            self.end_phase()

        if self.job.get("dump"):
            d = res["artifacts"].get("xla_dump")
            if d and not (os.path.isdir(d) and os.listdir(d)):
                self.notes.append("XLA dump directory is empty (this backend/version ignored --xla_dump_to)")

    def _replayed_reason(self, route):
        failed = [a for a in self.attempts if not a.get("skipped")]
        reason = "replayed via route %r" % route
        if failed:
            reason += " after %s failed (%s)" % (", ".join(a["route"] for a in failed),
                                                 "; ".join("%s: %s" % (a["route"], first_lines(a["error"], 300))
                                                           for a in failed))
        return reason

    def _incompatible_reason(self):
        import jax

        tried = [a for a in self.attempts if not a.get("skipped")]
        if not tried:
            return ("incompatible: no load route was possible (%s)"
                    % "; ".join("%s: %s" % (a["route"], a["error"]) for a in self.attempts))
        best = _furthest_attempt(tried)
        alike = [a for a in tried if a["error"] == best["error"] and a["stage"] == best["stage"]]  # said once
        others = [a for a in tried if a not in alike]
        names = ", ".join(repr(a["route"]) for a in sorted(alike, key=lambda a: a is not best))
        reason = "incompatible with jax %s: route%s %s failed at %s: %s" % (
            jax.__version__, "s" if len(alike) > 1 else "", names, best["stage"], best["error"])
        if others:
            reason += " || other routes: " + "; ".join(
                "%s (%s): %s" % (a["route"], a["stage"], first_lines(a["error"], 400)) for a in others)
        return reason

    def describe(self, exp):
        """What the host stores for a function it cannot deserialize itself (packing on another JAX)."""
        from jax._src.export import serialization

        adir = self.job["artifacts_dir"]

        def write(fname, data):
            p = os.path.join(adir, fname)
            with open(p, "wb") as fh:
                fh.write(data)
            return p

        desc = {"fields": exported_fields(exp), "in_tree": describe_tree(exp.in_tree),
                "out_tree": describe_tree(exp.out_tree),
                "serialization_version": getattr(serialization, "_SERIALIZATION_VERSION", None),
                "mlir_module": write("describe.mlir_module.bc", bytes(exp.mlir_module_serialized)),
                "stablehlo_text": write("describe.stablehlo.mlir", exp.mlir_module().encode("utf-8")),
                "mlir_module_compat": None}
        try:
            desc["mlir_module_compat"] = write("describe.mlir_module_compat.bc", serialize_compat_artifact(exp))
        except Exception as e:
            self.notes.append("describe: no compat artifact: %s" % exc_msg(e))
        return desc

    def write_hlo(self, lowered, compiled):
        adir = self.job["artifacts_dir"]
        arts: Any = self.result["artifacts"]  # named by the caller

        def put(name, fname, fn):
            try:
                text = fn()
            except Exception as e:
                self.notes.append("could not produce %s: %s" % (name, exc_msg(e)))
                return None
            p = os.path.join(adir, fname)
            with open(p, "w") as fh:
                fh.write(text)
            arts[name] = p
            return text

        put("stablehlo_lowered", "lowered.stablehlo.mlir", lambda: lowered.as_text())
        put("hlo_before", "hlo_before_optimizations.txt", lambda: lowered.as_text(dialect="hlo"))
        self.hlo_after = put("hlo_after", "hlo_after_optimizations.txt", lambda: compiled.as_text())

    def write_outputs(self, out):
        import jax
        import numpy as np

        leaves = jax.tree_util.tree_leaves(out)
        odir = self.job["outputs_dir"]
        outs: list[OutputLeaf] = []
        for i, leaf in enumerate(leaves):
            a = np.asarray(leaf)
            a = np.ascontiguousarray(a) if a.ndim else a  # ascontiguousarray turns 0-d into 1-d
            p = os.path.join(odir, "out_%d.bin" % i)
            a.tofile(p)
            outs.append({"shape": [int(d) for d in a.shape], "dtype": a.dtype.name, "path": p})
        self.result["outputs"] = outs


def _furthest_attempt(tried):
    """The attempt that got furthest; ties go to the later (more targeted) route."""
    best = tried[0]
    for a in tried:
        if STAGE_RANK[a["stage"]] >= STAGE_RANK[best["stage"]]:
            best = a
    return best
