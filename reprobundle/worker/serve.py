"""`python path/to/reprobundle/worker serve`: a long-lived worker that loads, compiles and runs one small StableHLO
module after another in one process (minimize tests hundreds of candidates per contender this way).

Protocol: frames on stdin and stdout, each a 4-byte big-endian length then a msgpack map (``use_bin_type=True``,
read with ``raw=False``). stdout carries only frames: whatever jax, XLA or a module prints goes to stderr.

1. The host's first frame: ``{"op": "start", "settings": {...}, "platform": str|None}`` (the job's ``settings``
   and ``platform``, applied as a job applies them: environment variables and XLA_FLAGS before jax is imported,
   JAX config options after). The worker answers ``{"status": "ok", "pid", "jax", "jaxlib", "platform",
   "xla_flags"}``, or ``{"status": "error", "phase": "start", "error_type", "message"}`` and exits.
2. Then any number of ``{"op": "run", "text": module text, "inputs": [{"dtype", "shape", "bytes"}],
   "want": "outputs"|"time"|"both"|"none", "warmup": int, "repeat": int, "keep": bool, "compiler_options":
   {name: bool|int|float|str}}``; ``compiler_options`` (optional) are XLA DebugOptions fields set for this compile
   only (``Lowered.compile(compiler_options)``: explain's screen compiles one module under many flags in one
   process; a name XLA does not define, or a repeated field, fails that module's compile). While it works on one the worker sends
   ``{"op": "phase", "phase": "load"|"compile"|"execute"}`` as it enters each phase (a host that sees the process
   die knows where), then the answer: ``{"status": "ok", "outputs": [{"dtype", "shape", "bytes"}],
   "samples_ns": [int], "compile_s": float}`` or ``{"status": "error", "phase", "error_type": the exception's class
   name, "message": its first line, "detail": its first lines}``. A module that fails never ends the worker.
   Phases: "load" parses the text, rebuilds an Exported from it as ``pack --stablehlo`` does and lowers its call;
   "compile" is XLA's compile (and the jaxlib kernels the module calls); "execute" runs it (and times it).
   With ``"keep": true`` the worker keeps the compiled module and its inputs (until the next "run"): then
   ``{"op": "time", "warmup": int, "repeat": int}`` times it again without loading it (a paired timing alternates
   two workers' batches), answered as a "run" is.
3. ``{"op": "close"}`` or the end of stdin ends the worker (exit 0).
"""
from __future__ import annotations

import faulthandler
import os
import struct
import sys

from .dtypes import dtype_name, np_dtype
from .environment import lowering_platform
from .job import Worker
from .protocol import JobError, RouteFailure, first_lines
from .rebuild import rebuild_exported
from .settings import apply_config, apply_environment
from .signature import main_signature
from .stablehlo import serialize_compat_artifact

HEADER = struct.Struct(">I")
# Modules served between two jax.clear_caches(): each module is new, so its cached traces only cost memory.
CLEAR_CACHES_EVERY = 25


class Channel:
    """Frames on stdin and on a private copy of the original stdout; fd 1 becomes stderr, so nothing else can
    write into the channel."""

    def __init__(self):
        self._out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._in = sys.stdin.buffer

    def send(self, message):
        import msgpack

        data = msgpack.packb(message, use_bin_type=True)
        self._out.write(HEADER.pack(len(data)) + data)
        self._out.flush()

    def receive(self):
        """The next frame, or None at the end of stdin."""
        import msgpack

        head = self._read(HEADER.size)
        if head is None:
            return None
        body = self._read(HEADER.unpack(head)[0])
        if body is None:
            return None
        return msgpack.unpackb(body, raw=False, strict_map_key=False)

    def _read(self, size):
        data = b""
        while len(data) < size:
            chunk = self._in.read(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data


def error_answer(phase, e):
    text = str(e.message if isinstance(e, RouteFailure) else e).strip()
    cause = getattr(e, "cause", None)  # SignatureError: the parser's own words
    if cause is not None:
        text = "%s: %s" % (text, " ".join(str(cause).split()))
    return {"status": "error", "phase": phase, "error_type": type(e).__name__,
            "message": first_lines(text.splitlines()[0] if text else "", 500), "detail": first_lines(text, 2000)}


def encode_array(a):
    import numpy as np

    a = np.asarray(a)
    return {"dtype": dtype_name(a.dtype), "shape": [int(d) for d in a.shape],
            "bytes": np.ascontiguousarray(a).tobytes()}


def decode_array(leaf):
    import numpy as np

    dt = np_dtype(leaf["dtype"])
    shape = tuple(int(d) for d in leaf["shape"])
    return np.frombuffer(leaf["bytes"], dtype=dt).reshape(shape).copy()


class ModuleServer(Worker):
    """One process's jax, serving modules one after another; the load, kernel and timing code is the job's."""

    def __init__(self, start):
        Worker.__init__(self, {"settings": start.get("settings") or {}, "platform": start.get("platform")})
        self.fields = None
        self.served = 0
        self.kept = None  # (compiled, device inputs) of the last module run with "keep"

    def start(self):
        """Settings and platform before jax is imported, then the backend initialised (an XLA flag this release
        does not know aborts here, before any module)."""
        try:
            given = os.environ.get("XLA_FLAGS", "").strip()
            contender_flags = apply_environment(self.job, self.notes)
            if contender_flags:
                os.environ["XLA_FLAGS"] = (given + " " + contender_flags).strip()
            self.select_platform()
            import jax
            import jaxlib.version

            platform = lowering_platform()
            want = self.job.get("platform")
            if want and platform != want:
                raise JobError("asked to run on %s, but jax runs on %s" % (want, platform))
            apply_config(self.job, self.notes)
        except Exception as e:
            return error_answer("start", e)
        return {"status": "ok", "pid": os.getpid(), "jax": jax.__version__, "jaxlib": jaxlib.version.__version__,
                "platform": platform, "xla_flags": os.environ.get("XLA_FLAGS", ""), "notes": list(self.notes)}

    def serve_request(self, request, say):
        """The answer to one "run" request; `say(phase)` tells the host each phase as it starts."""
        phase = "load"
        self.kept = None
        try:
            say(phase)
            self.host_inputs = [decode_array(leaf) for leaf in request.get("inputs") or []]
            self.input_meta = [(tuple(a.shape), a.dtype) for a in self.host_inputs]
            exp, lowered = self.lower_text(str(request["text"]))
            phase = "compile"
            say(phase)
            compiled, compile_s = self.compile_module(lowered, exp, request.get("compiler_options"))
            phase = "execute"
            say(phase)
            return self.execute_module(compiled, request, compile_s)
        except Exception as e:
            return error_answer(phase, e)
        finally:
            self.forget_module()

    def lower_text(self, text):
        """(Exported, its call lowered) for the module text, as `pack --stablehlo` wraps a raw module."""
        import jax

        signature = main_signature(text)
        ins, outs = signature["in_avals"], signature["out_avals"]
        if any(d is None for a in ins + outs for d in a["shape"]):
            raise JobError("@main has dynamic dimensions; serve static shapes")
        self.fields = {"fun_name": "main", "in_avals": ins, "out_avals": outs, "nr_devices": 1,
                       "platforms": [lowering_platform()]}
        msg = self.check_inputs([(tuple(a["shape"]), a["dtype"]) for a in ins], "@main of the module")
        if msg:
            raise JobError(msg)
        self._enable_x64_if_needed()
        exp, _ = rebuild_exported(self.import_export(), self.fields, serialize_compat_artifact(text))
        self.dev_inputs = [jax.device_put(a) for a in self.host_inputs]
        call = exp.call

        def replay(*flat):
            return call(*flat)

        return exp, jax.jit(replay).lower(*self.dev_inputs)

    def compile_module(self, lowered, exp, compiler_options=None):
        import time

        self.prepare_kernels(lowered, exp)
        t0 = time.perf_counter()
        compiled = lowered.compile(dict(compiler_options)) if compiler_options else lowered.compile()
        return compiled, time.perf_counter() - t0

    def execute_module(self, compiled, request, compile_s):
        import jax

        self.kept = None
        if request.get("keep"):
            self.kept = (compiled, self.dev_inputs)
        want = request.get("want") or "outputs"
        answer = {"status": "ok", "outputs": [], "samples_ns": [], "compile_s": compile_s}
        if want in ("outputs", "both"):
            out = compiled(*self.dev_inputs)
            jax.block_until_ready(out)
            answer["outputs"] = [encode_array(leaf) for leaf in jax.tree_util.tree_leaves(out)]
            del out
        if want in ("time", "both"):
            answer["samples_ns"] = self.time_calls(compiled, int(request.get("warmup", 1)),
                                                   int(request.get("repeat", 5)))
        return answer

    def time_kept(self, request, say):
        """The answer to a "time" request: timed calls of the module the last "run" kept."""
        say("execute")
        if self.kept is None:
            return error_answer("execute", JobError("no module is kept: send a run request with keep first"))
        compiled, self.dev_inputs = self.kept
        try:
            samples = self.time_calls(compiled, int(request.get("warmup", 0)), int(request.get("repeat", 5)))
        except Exception as e:
            return error_answer("execute", e)
        finally:
            self.__dict__.pop("dev_inputs", None)
        return {"status": "ok", "outputs": [], "samples_ns": samples, "compile_s": None}

    def forget_module(self):
        self.host_inputs = []
        self.input_meta = []
        self.__dict__.pop("dev_inputs", None)
        self.fields = None
        self.served += 1
        if self.served % CLEAR_CACHES_EVERY == 0:
            import jax

            jax.clear_caches()


def serve():
    """Serve the host's frames until it closes stdin or says "close"; 0 then, 1 when the start failed."""
    channel = Channel()
    faulthandler.enable()  # a fatal signal (XLA's abort) leaves the Python stack on stderr, which the host reads
    start = channel.receive()
    if start is None:
        return 0
    server = ModuleServer(start if isinstance(start, dict) else {})
    answer = server.start()
    channel.send(answer)
    if answer["status"] != "ok":
        return 1

    def say(phase):
        channel.send({"op": "phase", "phase": phase})

    while True:
        request = channel.receive()
        if request is None or not isinstance(request, dict) or request.get("op") == "close":
            return 0
        if request.get("op") == "run":
            channel.send(server.serve_request(request, say))
        elif request.get("op") == "time":
            channel.send(server.time_kept(request, say))
        else:
            channel.send(error_answer("load", JobError("unknown op %r" % first_lines(str(request.get("op")), 100))))
