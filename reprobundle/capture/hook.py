"""What runs inside the captured program: it sees every call of every jitted function, times them while listing,
and exports the matching ones, with copies of their arguments, at the chosen call.

Interception point. A call of a `jax.jit` object (and so of `nnx.jit`, `eqx.filter_jit`, `pjit`, jax.jit around
`jax.value_and_grad` or `lax.scan`...) enters jax's C++ dispatcher. It runs a signature's cached executable by
itself, or calls back into Python, `cache_miss` in jax/_src/pjit.py, which every release from 0.4.30 to 0.12 writes
the same way: it calls the module function `_infer_params(fun, jit_info, args, kwargs)` (`(jit_info, args,
kwargs)` on 0.4.30) with the user's function and its unflattened arguments before the call runs, and
`_get_fastpath_data(executable, out_tree, args_flat, out_flat, ...)` after it ran; the latter's result tells C++
whether it may run the next calls of that signature without Python (None: "keep calling Python", which jax itself
returns for computations with effects). The hook replaces those two module attributes with wrappers:

- `_infer_params`, when called from `cache_miss` at the top level (no trace under way, so nested jits and the
  hook's own export are ignored): counts the call under (function, signature), exports it when it is the call to
  capture (before it runs, so donated buffers are still intact), starts the clock;
- `_get_fastpath_data`: stops the clock (listing and --top: `block_until_ready` on the outputs), and returns None
  only for signatures the hook must keep seeing: every one while timing, a matching one until its capture.
  Every other signature gets jax's own fast-path data and never reaches Python again, so computations that do
  not match cost nothing after their first call. When a capture is complete the C++ dispatch caches (not the
  compiled executables) are cleared, so the captured function returns to the fast path as well.

Functions of JAX itself (eager `jnp` operations, primitives applied outside jit) are not recorded. Nothing here
changes what a computation computes: the same executables run, on the same arguments, in the same order. The
export traces the user's function once more (Python side effects at trace time run again at a captured call).
"""

from __future__ import annotations

import inspect
import os
import random
import re
import statistics
import sys
import threading
import time
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ReproBundleError, UsageError
from ..units import human_bytes
from .staging import CaptureOptions, Staged

MAX_SAMPLES = 4096  # run times kept per signature (reservoir sampling) for the median
_REPORT_EVERY_S = 5.0
_INTERNAL_MODULES = ("jax.", "jaxlib.")
_FRAMEWORK_WRAPPERS = {"equinox._jit": "eqx.filter_jit"}

_tls = threading.local()
_ACTIVE: "Recorder | None" = None
_PATCH: dict | None = None
_LISTENER = {"registered": False}


# ----------------------------------------------------------------------------------------------- naming


def _unwrap(fun):
    inner = fun
    for _ in range(32):
        nxt = getattr(inner, "__wrapped__", None)
        if nxt is None:
            func = getattr(inner, "func", None)  # functools.partial
            if func is None or not callable(func) or type(inner).__name__ != "partial":
                break
            nxt = func
        inner = nxt
    return inner


def describe_function(fun) -> dict | None:
    """Name, module, jit name, definition site and a stable key of a jitted function; None for JAX's own."""
    if getattr(fun, "_apply_primitive", False):
        return None
    inner = _unwrap(fun)
    jit_name = getattr(fun, "__name__", None) or getattr(inner, "__name__", None) or type(fun).__name__
    name = getattr(inner, "__qualname__", None) or getattr(fun, "__qualname__", None) or str(jit_name)
    module = str(getattr(inner, "__module__", None) or getattr(fun, "__module__", None) or "")
    if module == "jax" or module.startswith(_INTERNAL_MODULES):
        return None
    code = getattr(inner, "__code__", None)
    location = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    via = _FRAMEWORK_WRAPPERS.get(module, "")
    if via:  # the wrapper's own module and file say nothing about the user's function
        module, location = "", ""
    elif inner is not fun and type(fun).__module__.startswith("flax."):
        via = "nnx.jit"
    name, jit_name = str(name), str(jit_name)
    return {"key": f"{module}:{name}:{location}:{jit_name}", "name": name, "module": module, "jit_name": jit_name,
            "location": location, "via": via, "match_text": f"{module}.{name} {name} {jit_name}"}


def display_name(info: dict) -> str:
    module = info.get("module") or ""
    return info["name"] if module in ("", "__main__") else f"{module}.{info['name']}"


# ------------------------------------------------------------------------------------------- signatures

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int16": "i16",
          "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
          "complex64": "c64", "complex128": "c128", "bool": "bool"}


def _is_array(leaf) -> bool:
    return hasattr(leaf, "shape") and hasattr(leaf, "dtype") and not isinstance(leaf, type)


def _static_of(ji, args: tuple, kwargs: dict) -> list:
    """The jit's static arguments present in this call, as flatten_call takes them (argnums, then argnames)."""
    nums = [int(i) for i in getattr(ji, "static_argnums", ()) or () if 0 <= int(i) < len(args)]
    names = [n for n in getattr(ji, "static_argnames", ()) or () if n in kwargs]
    return nums + names


def _signature(args: tuple, kwargs: dict, static: list) -> tuple[tuple, list]:
    """A hashable key that changes when jax would compile again (tree structure, shapes, dtypes, weak types,
    static values), and the non-array leaves (values baked into an export)."""
    import jax

    static_set = set(static)
    dyn_args = tuple(None if i in static_set else a for i, a in enumerate(args))
    dyn_kwargs = {k: (None if k in static_set else v) for k, v in kwargs.items()}
    leaves, treedef = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
    key: list = [treedef]
    baked: list = []
    for leaf in leaves:
        if _is_array(leaf):
            key.append((tuple(leaf.shape), str(leaf.dtype), bool(getattr(leaf, "weak_type", False))))
        else:
            key.append(type(leaf))
            baked.append(leaf)
    for s in static:
        value = args[s] if isinstance(s, int) else kwargs[s]
        baked.append(value)
        try:
            hash(value)
            key.append(("static", s, value))
        except TypeError:
            key.append(("static", s, id(value)))
    return tuple(key), baked


def _nbytes(leaf) -> int:
    try:
        return int(leaf.nbytes)
    except Exception:
        return 0


def _leaf_text(leaf) -> str:
    dtype = str(leaf.dtype)
    return f"{_SHORT.get(dtype, dtype)}[{','.join(str(int(d)) for d in leaf.shape)}]"


def describe_args(fun, args: tuple, kwargs: dict, static: list) -> dict:
    """Per top-level argument a short text (`x: f32[8,32]`, `state: 14 arrays, 1.2 MiB`, `lr: float`,
    `train: static`), the total input bytes, and a note when the inputs span several devices."""
    import jax

    from .flatten import argument_names

    names = argument_names(fun, len(args))
    items = list(zip(names, args)) + list(kwargs.items())
    keys = list(range(len(args))) + list(kwargs)
    described, total, devices = [], 0, 1
    for key, (name, value) in zip(keys, items):
        if key in static:
            described.append({"name": str(name), "text": "static"})
            continue
        leaves = jax.tree_util.tree_leaves(value)
        arrays = [l for l in leaves if _is_array(l)]
        size = sum(_nbytes(l) for l in arrays)
        total += size
        for l in arrays:
            try:
                devices = max(devices, len(l.sharding.device_set))
            except Exception:
                pass
        if len(leaves) == 1 and arrays:
            text = _leaf_text(arrays[0])
        elif not arrays:
            text = ("None" if value is None else "empty") if not leaves else \
                type(value).__name__ if len(leaves) == 1 else f"{len(leaves)} values"
        else:
            text = f"{len(arrays)} arrays, {human_bytes(size)}"
        described.append({"name": str(name), "text": text})
    note = f"inputs sharded over {devices} devices" if devices > 1 else ""
    return {"args": described, "input_bytes": total, "note": note}


def _same_values(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        try:
            if (x == y) is not True:
                return False
        except Exception:
            return False
    return True


def _refusal_hint(infer_result) -> str:
    """Best effort, from the jaxpr jax just traced: why jax.export would refuse this computation."""
    p = infer_result[0] if isinstance(infer_result, tuple) and infer_result else infer_result
    params = getattr(p, "params", None)
    if params is None and isinstance(infer_result, tuple) and len(infer_result) > 1:
        params = infer_result[1]
    closed = params.get("jaxpr") if isinstance(params, dict) else None
    if closed is None:
        return ""
    effects = getattr(closed, "effects", None)
    seen: set = set()

    def callbacks(jaxpr, depth=0):
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        if depth > 50 or id(jaxpr) in seen:
            return None
        seen.add(id(jaxpr))
        for eqn in getattr(jaxpr, "eqns", ()):
            name = getattr(eqn.primitive, "name", "")
            if "callback" in name or name == "debug_print":  # pure/io/debug callbacks, jax.debug.print
                return name
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        found = callbacks(sub, depth + 1)
                        if found:
                            return found
        return None

    found = callbacks(closed)
    if found:
        return f"host callback ({found}): cannot be exported"
    if effects:
        return f"effects ({', '.join(sorted(type(e).__name__ for e in effects))}): cannot be exported"
    return ""


# ---------------------------------------------------------------------------------------------- records


@dataclass
class SigEntry:
    index: int
    args: list[dict]
    input_bytes: int
    note: str = ""
    calls: int = 0
    timed_calls: int = 0
    compile_ns: int = 0
    total_ns: int = 0
    samples: list = field(default_factory=list)
    pending: Staged | None = None  # call 1 held until call 2 comes (default --call)
    pending_baked: list | None = None
    busy: bool = False  # a thread is exporting it
    done: bool = False
    captured: str | None = None
    capture_call: int | None = None
    failure: str | None = None


@dataclass
class FunctionEntry:
    key: str
    name: str
    module: str
    jit_name: str
    location: str
    via: str
    sigs: dict = field(default_factory=dict)
    holder: SigEntry | None = None  # the signature being captured when only one is
    done: bool = False

    def info(self) -> dict:
        return {"key": self.key, "name": self.name, "module": self.module, "jit_name": self.jit_name,
                "location": self.location, "via": self.via, "display": display_name(self.__dict__)}


class _Record:
    __slots__ = ("frame", "entry", "sig", "keep", "t0", "trace_s", "compile_s", "first")

    def __init__(self, frame, entry, sig, keep, first):
        self.frame, self.entry, self.sig, self.keep, self.first = frame, entry, sig, keep, first
        self.trace_s = self.compile_s = 0.0
        self.t0 = time.perf_counter_ns()


class Recorder:
    """The state of one capture: options, the computations seen, and where staged captures go (`sink`)."""

    def __init__(self, options: CaptureOptions, sink: Callable[[Staged], None],
                 on_change: Callable[[], None] | None = None) -> None:
        self.options = options
        self.pattern = re.compile(options.match) if options.match else None
        self.sink = sink
        self.on_change = on_change
        self.lock = threading.RLock()
        self.functions: dict[str, FunctionEntry] = {}
        self.problems: list[str] = []
        self.pid = os.getpid()
        self._by_id: dict[int, tuple] = {}
        self._seq = 0
        self._rng = random.Random(0)  # never the program's global random state
        self._clear_dispatch = False
        self._last_report = time.monotonic()
        self.hook_calls = 0  # top-level jitted calls that reached Python (every other one ran in C++)

    # -- the two events of a call

    def begin(self, fun, ji, args: tuple, kwargs: dict, frame: int):
        self.hook_calls += 1
        entry = self._entry(fun)
        if entry is None:
            return None
        static = _static_of(ji, args, kwargs)
        key, baked = _signature(args, kwargs, static)
        with self.lock:
            found: SigEntry | None = entry.sigs.get(key)
            first = found is None
            if found is None:
                found = entry.sigs[key] = SigEntry(index=len(entry.sigs) + 1,
                                                   **describe_args(fun, args, kwargs, static))
            sig = found
            sig.calls += 1
            action = self._action(entry, sig)
        if action:
            self._capture(entry, sig, fun, args, kwargs, static, baked, action)
        with self.lock:
            keep = self.options.timing or self._wants_more(entry, sig)
        record = _Record(frame, entry, sig, keep, first)
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        elif stack:
            _drop_stale(stack)
        stack.append(record)
        return record

    def end(self, frame: int, out_flat) -> bool | None:
        stack = getattr(_tls, "stack", None)
        record = _pop(stack, frame)
        if record is None:
            return None
        if self.options.timing:
            for x in out_flat or ():
                try:
                    x.block_until_ready()
                except Exception:
                    pass
            wall = time.perf_counter_ns() - record.t0
            compile_ns = int((record.trace_s + record.compile_s) * 1e9)
            with self.lock:
                sig = record.sig
                run = max(0, wall - compile_ns)
                sig.compile_ns += compile_ns
                sig.total_ns += run
                sig.timed_calls += 1
                if len(sig.samples) < MAX_SAMPLES:
                    sig.samples.append(run)
                else:
                    j = self._rng.randrange(sig.timed_calls)
                    if j < MAX_SAMPLES:
                        sig.samples[j] = run
            if self.on_change is not None and time.monotonic() - self._last_report > _REPORT_EVERY_S:
                self._last_report = time.monotonic()
                self.on_change()
        return record.keep

    def abort(self, frame: int) -> None:
        _pop(getattr(_tls, "stack", None), frame)

    def inspect(self, record: _Record, infer_result) -> None:
        """First call of a signature while timing: note what would stop its export (effects, callbacks)."""
        if record.first and self.options.timing and not record.sig.note:
            record.sig.note = _refusal_hint(infer_result)

    def problem(self, text: str) -> None:
        """Note a fault of the hook itself (the program goes on), each once and at most 20."""
        if text not in self.problems and len(self.problems) < 20:
            self.problems.append(text)

    def take_dispatch_clear(self) -> bool:
        if self._clear_dispatch:
            self._clear_dispatch = False
            return True
        return False

    # -- deciding

    def _entry(self, fun) -> FunctionEntry | None:
        hit = self._by_id.get(id(fun))
        if hit is not None and hit[0]() is fun:
            return hit[1]
        info = describe_function(fun)
        entry = None
        match_text = info.pop("match_text") if info is not None else ""
        if info is not None and (self.pattern is None or self.pattern.search(match_text)):
            with self.lock:
                entry = self.functions.get(info["key"])
                if entry is None:
                    entry = self.functions[info["key"]] = FunctionEntry(**info)
        try:
            ref = weakref.ref(fun)
        except TypeError:
            return entry
        if len(self._by_id) > 8192:
            self._by_id = {k: v for k, v in self._by_id.items() if v[0]() is not None}
        self._by_id[id(fun)] = (ref, entry)
        return entry

    def _target(self) -> int:
        return self.options.call or 2

    def _action(self, entry: FunctionEntry, sig: SigEntry) -> str | None:
        if not self.options.capturing or sig.done or sig.busy or entry.done:
            return None
        if not self.options.all_signatures and entry.holder not in (None, sig):
            return None
        n = sig.calls
        if self.options.call is None:
            action = "provisional" if n == 1 else "final" if n == 2 else None
        else:
            action = "final" if n == self.options.call else None
        if action:
            sig.busy = True
            if not self.options.all_signatures:
                entry.holder = sig
        return action

    def _wants_more(self, entry: FunctionEntry, sig: SigEntry) -> bool:
        if not self.options.capturing or sig.done or entry.done:
            return False
        if not self.options.all_signatures and entry.holder not in (None, sig):
            return False
        return sig.calls < self._target()

    # -- capturing

    def _capture(self, entry, sig, fun, args, kwargs, static, baked, action) -> None:
        import numpy as np

        from .export import export_function, host_leaves
        from .flatten import flatten_call

        _tls.busy = True
        try:
            t0 = time.perf_counter()
            reuse = sig.pending if action == "final" and sig.pending is not None and \
                _same_values(sig.pending_baked or [], baked) else None
            if reuse is not None:  # same signature, same baked values: call 1's export fits call 2's inputs
                exported = reuse.exported
                leaves = host_leaves(flatten_call(fun, tuple(args), dict(kwargs), static).dynamic)
            else:
                exported, leaves = export_function(fun, tuple(args), dict(kwargs), static)
            t1 = time.perf_counter()
            # Copies, taken before the call runs: it may donate (and overwrite) the buffers they came from.
            leaves = [np.array(leaf, copy=True) for leaf in leaves]
            t2 = time.perf_counter()
            costs = {"export_s": t1 - t0, "copy_s": t2 - t1}
            if reuse is not None:  # the export was made at call 1, and its copy of the arguments is thrown away
                costs = {"export_s": reuse.costs["export_s"], "copy_s": reuse.costs["copy_s"] + t2 - t0}
            with self.lock:
                self._seq += 1
                sid = f"{os.getpid()}-{self._seq}"  # (a forked child carries on this recorder)
            import jax

            staged = Staged(id=sid, function=entry.info(), signature=sig.index, call=sig.calls, args=sig.args,
                            exported=exported, leaves=leaves, jax_version=str(jax.__version__),
                            python=sys.executable, pid=os.getpid(), source=_source_of(fun),
                            costs={k: round(v, 6) for k, v in costs.items()})
            if action == "provisional":
                sig.pending, sig.pending_baked = staged, list(baked)
            else:
                sig.pending = sig.pending_baked = None
                self._emit(entry, sig, staged)
        except ReproBundleError as e:
            self._fail(entry, sig, e.message)
        except Exception as e:  # never let the hook break the program
            self._fail(entry, sig, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        finally:
            sig.busy = False
            _tls.busy = False

    def _fail(self, entry: FunctionEntry, sig: SigEntry, reason: str) -> None:
        with self.lock:
            sig.failure, sig.done, sig.pending, sig.pending_baked = reason, True, None, None
            if not self.options.all_signatures:
                entry.done = True
            self._clear_dispatch = not self.options.timing
        if self.on_change is not None:
            self.on_change()

    def _emit(self, entry: FunctionEntry, sig: SigEntry, staged: Staged) -> None:
        self.sink(staged)
        with self.lock:
            sig.captured, sig.capture_call, sig.done = staged.id, staged.call, True
            if not self.options.all_signatures:
                entry.done = True
            self._clear_dispatch = not self.options.timing
        if self.on_change is not None:
            self.on_change()

    def finish(self) -> None:
        """The program is ending: signatures called once are captured at that call (default --call)."""
        for entry in list(self.functions.values()):
            for sig in list(entry.sigs.values()):
                pending = sig.pending
                if pending is not None and not sig.done:
                    pending.note = "called only once: captured at the call that compiled it"
                    sig.pending = sig.pending_baked = None
                    try:
                        self._emit(entry, sig, pending)
                    except Exception as e:
                        self._fail(entry, sig, f"{type(e).__name__}: {e}")

    # -- results

    def rows(self) -> list[dict]:
        rows = []
        with self.lock:
            for entry in self.functions.values():
                for sig in entry.sigs.values():
                    samples = list(sig.samples)
                    rows.append({
                        **entry.info(), "signature": sig.index, "nsignatures": len(entry.sigs),
                        "args": sig.args, "arg_text": ", ".join(f"{a['name']}: {a['text']}" for a in sig.args),
                        "input_bytes": sig.input_bytes, "calls": sig.calls, "timed": self.options.timing,
                        "compile_ns": sig.compile_ns if sig.timed_calls else None,
                        "total_ns": sig.total_ns if sig.timed_calls else None,
                        "median_ns": statistics.median(samples) if samples else None,
                        "captured": sig.captured, "capture_call": sig.capture_call,
                        "pending": sig.pending is not None, "failure": sig.failure, "note": sig.note,
                        "pid": self.pid,
                    })
        return rows


def _source_of(fun) -> str | None:
    try:
        return inspect.getsource(_unwrap(fun))
    except Exception:
        return None


def _ancestors(frame_id_limit: int = 2000) -> set[int]:
    ids: set[int] = set()
    f: Any = sys._getframe(1)
    while f is not None and len(ids) < frame_id_limit:
        ids.add(id(f))
        f = f.f_back
    return ids


def _drop_stale(stack: list) -> None:
    """Records of calls that raised before finishing (their frames are gone); a call genuinely in progress on
    this thread (a jitted function called from a host callback) is an ancestor of the current frame."""
    alive = _ancestors()
    stack[:] = [r for r in stack if r.frame in alive]


def _pop(stack: list | None, frame: int):
    if not stack:
        return None
    for i in range(len(stack) - 1, -1, -1):
        if stack[i].frame == frame:
            record = stack[i]
            del stack[i:]
            return record
    return None


# ------------------------------------------------------------------------------------------ the patches


def _on_duration(event, duration, *args, **kwargs) -> None:
    if _ACTIVE is None or getattr(_tls, "busy", False):
        return
    stack = getattr(_tls, "stack", None)
    if not stack:
        return
    record = stack[-1]
    if event.endswith("jaxpr_trace_duration"):
        record.trace_s = max(record.trace_s, float(duration))  # nested traces are inside the outermost
    elif event.endswith(("jaxpr_to_mlir_module_duration", "backend_compile_duration")):
        record.compile_s += float(duration)


def _clear_dispatch_caches(pjit) -> None:
    """Drop jax's C++ dispatch entries (not the compiled executables): each jitted function's next call passes
    through Python once, where the hook sees it (and gives the fast path back to the ones it no longer needs)."""
    for name in ("_cpp_pjit_cache_fun_only", "_cpp_pjit_cache_explicit_attributes", "_cpp_pjit_cache"):
        cache = getattr(pjit, name, None)
        clear_all = getattr(type(cache), "clear_all", None) if cache is not None else None
        if clear_all is not None:
            clear_all()
            return


def _cache_miss_caller(frame: types.FrameType | None) -> types.FrameType | None:
    """The frame of jax's cache_miss that called _infer_params, else None (the call is not a dispatch)."""
    if frame is not None and frame.f_code.co_name == "_python_pjit_helper":  # 0.4.30 to 0.8: cache_miss -> helper -> here
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "cache_miss":
        return None
    return frame


def _begin_record(rec: Recorder, a: tuple, old_style: bool, frame_id: int):
    """The recorder's record of a jitted call from _infer_params' arguments; None when that fails (noted as a
    problem: a bug here must never break the program)."""
    try:
        if old_style:
            ji, args, kwargs = a
            fun = ji.fun
        else:
            fun, ji, args, kwargs = a
        return rec.begin(fun, ji, tuple(args or ()), dict(kwargs or {}), frame_id)
    except Exception as e:
        rec.problem(f"hook: {type(e).__name__}: {e}")
        return None


def _inspect_quietly(rec: Recorder, record, result) -> None:
    try:
        rec.inspect(record, result)
    except Exception:  # a bug here must never break the program
        pass


def install(recorder: Recorder, *, clear: bool = True) -> None:
    """Start seeing jitted calls in this process. `clear`: jitted functions called before keep their fast path
    until their dispatch entries are cleared, which costs each of them one pass through Python."""
    global _ACTIVE, _PATCH
    if _ACTIVE is not None:
        raise UsageError("a capture is already active in this process", hint="capture sessions do not nest")
    import jax  # noqa: F401
    from jax._src import core, pjit

    if _PATCH is None:
        orig_infer = getattr(pjit, "_infer_params", None)
        orig_fast = getattr(pjit, "_get_fastpath_data", None)
        if not callable(orig_infer) or not callable(orig_fast):
            raise UsageError(f"capture does not know how jax {jax.__version__} dispatches jitted calls "
                             "(jax._src.pjit._infer_params and _get_fastpath_data are missing)",
                             hint="capture supports jax 0.4.30 to 0.12; pack the function with a factory instead")
        params = list(inspect.signature(orig_infer).parameters)
        old_style = params[:1] == ["jit_info"]  # 0.4.30: (jit_info, args, kwargs), fun is jit_info.fun
        clean = core.trace_state_clean

        def _infer_params(*a, **k):
            rec = _ACTIVE
            if rec is None or getattr(_tls, "busy", False):
                return orig_infer(*a, **k)
            frame = _cache_miss_caller(sys._getframe(1))
            if frame is None or not clean():
                return orig_infer(*a, **k)
            if len(a) != (3 if old_style else 4) or k:  # not the call shape cache_miss uses
                return orig_infer(*a, **k)
            record = _begin_record(rec, a, old_style, id(frame))
            try:
                result = orig_infer(*a, **k)
            except BaseException:
                if record is not None:
                    rec.abort(id(frame))
                raise
            if record is not None and record.first:
                _inspect_quietly(rec, record, result)
            return result

        def _get_fastpath_data(*a, **k):
            data = orig_fast(*a, **k)
            rec = _ACTIVE
            if rec is None or getattr(_tls, "busy", False) or not getattr(_tls, "stack", None):
                return data
            frame = sys._getframe(1)
            if frame.f_code.co_name != "cache_miss":
                return data
            try:
                keep = rec.end(id(frame), a[3] if len(a) > 3 else k.get("out_flat", ()))
                if rec.take_dispatch_clear():
                    _clear_dispatch_caches(pjit)
            except Exception as e:
                rec.problem(f"hook: {type(e).__name__}: {e}")
                keep = False
            return None if keep else data

        _PATCH = {"module": pjit, "infer": orig_infer, "fast": orig_fast}
        pjit._infer_params = _infer_params
        pjit._get_fastpath_data = _get_fastpath_data
    if not _LISTENER["registered"]:
        try:
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(_on_duration)  # type: ignore[arg-type]
        except Exception:  # compile times are then reported as unknown
            pass
        _LISTENER["registered"] = True
    _ACTIVE = recorder
    if clear:
        _clear_dispatch_caches(pjit)


def uninstall() -> None:
    """Stop seeing calls and put jax's functions back; every jitted function returns to the fast path."""
    global _ACTIVE, _PATCH
    _ACTIVE = None
    if _PATCH is not None:
        pjit = _PATCH["module"]
        pjit._infer_params = _PATCH["infer"]
        pjit._get_fastpath_data = _PATCH["fast"]
        _PATCH = None
        _clear_dispatch_caches(pjit)
    _tls.stack = []


# ---------------------------------------------------------------------------------- the child process


class _ChildSession:
    """The hook in a program run by `reprobundle capture`: stages captures and reports into the session folder."""

    def __init__(self, options: CaptureOptions, directory) -> None:
        from . import staging

        self.staging = staging
        self.directory = directory
        self.options = options
        self.recorder = Recorder(options, sink=self.stage, on_change=self.report)
        self.finished = False

    def stage(self, staged: Staged) -> None:
        self.staging.write_staged(self.directory, staged)

    def report(self) -> None:
        import jax

        from ..bundle.redaction import redact_argv

        try:
            self.staging.write_report(self.directory, os.getpid(), {
                "pid": os.getpid(), "python": sys.executable, "jax": str(jax.__version__), "argv": redact_argv(sys.argv),
                "timed": self.options.timing, "finished": self.finished, "rows": self.recorder.rows(),
                "hook_calls": self.recorder.hook_calls,
                "problems": list(self.recorder.problems)})
        except Exception:
            pass

    def finish(self) -> None:
        self.recorder.finish()
        self.finished = True
        self.report()


_CHILD: _ChildSession | None = None


def start_child(config: str) -> None:
    """Called by the capture sitecustomize once the program has imported jax."""
    global _CHILD
    from .staging import parse_child_config

    options, directory = parse_child_config(config)
    _CHILD = _ChildSession(options, directory)
    install(_CHILD.recorder, clear=False)
    _CHILD.report()


def finish_child() -> bool:
    """Called at interpreter exit: stage what is pending and write the final report. False when never started."""
    if _CHILD is None:
        return False
    _CHILD.finish()
    return True
