"""Running the worker: turn a bundle into a job, run `worker.py` by path in some Python, turn its result into data.

The host never imports the measured code or the worker's JAX: the worker is a subprocess of the chosen
environment's interpreter. A crash, a hang or an out-of-memory kill is an outcome like any other.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import msgpack
import numpy as np

from .errors import FormatError
from .redaction import redact, redact_env
from .registry import Registry, copy_tree_to_zip_blob

WORKER_PATH = Path(__file__).with_name("worker.py")
PROTOCOL = 1
_STDERR_TAIL = 4000


def dtype_of(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        try:
            return np.dtype(getattr(ml_dtypes, name))
        except AttributeError:
            raise FormatError(f"unknown dtype {name!r}") from None


@dataclass(frozen=True)
class Timing:
    warmup: int = 5
    repeat: int = 50


@dataclass
class WorkerOutcome:
    status: str  # ok / incompatible / error (from the worker) or crashed / timeout (from here)
    reason: str
    result: dict | None
    duration_s: float
    stderr_tail: str = ""
    workdir: Path | None = None


def build_job(registry: Registry, function: dict, input_leaves: Sequence[dict], workdir: Path, *,
              timing: Timing, dump: bool, profile: bool, routes: Sequence[str] | None = None,
              describe: bool = False) -> Path:
    """Write job.msgpack for the worker under `workdir`; blobs are read in place or via `workdir/blobs`."""
    cache = workdir / "blobs"

    def path_of(ref: dict | None) -> str | None:
        return None if ref is None else str(registry.blob_file(ref, cache))

    inputs = []
    for leaf in input_leaves:
        item = {"shape": leaf["shape"], "dtype": leaf["dtype"]}
        if "synthetic" in leaf:
            item["synthetic"] = leaf["synthetic"]
        else:
            item["path"] = path_of(leaf["blob"])
        inputs.append(item)
    job = {
        "protocol": PROTOCOL,
        "function": {
            "exported": path_of(function.get("exported")),
            "mlir_module": path_of(function.get("mlir_module")),
            "mlir_module_compat": path_of(function.get("mlir_module_compat")),
            "stablehlo_text": path_of(function.get("stablehlo_text")),
            "fields": function.get("fields"),
        },
        "inputs": inputs,
        "outputs_dir": str(workdir / "outputs"),
        "artifacts_dir": str(workdir / "artifacts"),
        "timing": {"warmup": timing.warmup, "repeat": timing.repeat},
        "dump": dump,
        "profile": profile,
        "routes": list(routes) if routes else None,
        "describe": describe,
    }
    (workdir / "outputs").mkdir(parents=True, exist_ok=True)
    (workdir / "artifacts").mkdir(parents=True, exist_ok=True)
    job_path = workdir / "job.msgpack"
    job_path.write_bytes(msgpack.packb(job, use_bin_type=True))
    return job_path


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def run_worker(python: str | Path, job_path: Path, *, timeout_s: float, memory_limit_bytes: int | None = None,
               extra_env: dict[str, str] | None = None) -> WorkerOutcome:
    """Run the worker on a job in `python`; never raises for what happens inside the subprocess."""
    workdir = job_path.parent
    result_path = workdir / "result.msgpack"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(extra_env or {})
    env["PYTHONNOUSERSITE"] = "1"

    def limit_memory() -> None:
        if memory_limit_bytes:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))

    start = time.perf_counter()
    # -I: isolated mode, so nothing from the host's cwd or user site shadows the environment's packages. The
    # launcher ties the worker's life to the host's first (see _LAUNCHER), then becomes the worker (exec).
    proc = subprocess.Popen([str(python), "-I", "-c", _LAUNCHER, str(os.getpid()), str(WORKER_PATH), str(job_path),
                             str(result_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=workdir,
                            start_new_session=True, preexec_fn=limit_memory if memory_limit_bytes else None)
    outcome = _wait_worker(proc, workdir, result_path, timeout_s, start)
    if memory_limit_bytes and outcome.status not in ("ok", "mismatch"):
        outcome.reason += f" (it ran under a memory limit of {memory_limit_bytes / 2**20:g} MiB: out of memory?)"
    return outcome


# Runs in the worker's interpreter before the worker: on Linux, PR_SET_PDEATHSIG makes the kernel SIGKILL the
# worker when the host dies, so a killed `reprobundle pack/replay` never leaves a worker running (and holding the
# accelerator) in its own session until its timeout. It survives the exec into worker.py. Without ctypes or prctl
# (other systems) it just runs the worker. A host that died before prctl took effect is caught by the ppid check.
_LAUNCHER = """\
import os, sys
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
os.execv(sys.executable, [sys.executable, "-I"] + sys.argv[2:])
"""


def _wait_worker(proc: subprocess.Popen, workdir: Path, result_path: Path, timeout_s: float,
                 start: float) -> WorkerOutcome:
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        return WorkerOutcome("timeout", f"the worker did not finish within {timeout_s:g} s and was killed",
                             None, time.perf_counter() - start, _tail(stderr), workdir)
    duration = time.perf_counter() - start
    tail = _tail(stderr)
    if proc.returncode < 0:
        sig = _signal_name(-proc.returncode)
        why = " (out of memory?)" if sig == "SIGKILL" else ""
        return WorkerOutcome("crashed", f"the worker was killed by {sig}{why}", None, duration, tail, workdir)
    if not result_path.is_file():
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        return WorkerOutcome("crashed", f"the worker exited with code {proc.returncode} without a result: {last}",
                             None, duration, tail, workdir)
    try:
        result = msgpack.unpackb(result_path.read_bytes(), raw=False, strict_map_key=False)
    except Exception as e:
        return WorkerOutcome("crashed", f"the worker wrote an unreadable result ({e})", None, duration, tail, workdir)
    return WorkerOutcome(str(result.get("status", "error")), str(result.get("reason", "")), result, duration, tail,
                         workdir)


def _tail(stderr: bytes | None) -> str:
    return (stderr or b"")[-_STDERR_TAIL:].decode("utf-8", "replace")


def read_outputs(result: dict) -> list[np.ndarray]:
    arrays = []
    for leaf in result.get("outputs") or []:
        arr = np.fromfile(leaf["path"], dtype=dtype_of(leaf["dtype"]))
        arrays.append(arr.reshape(leaf["shape"]))
    return arrays


def environment_of(result: dict | None) -> dict:
    env = dict((result or {}).get("environment") or {})
    if "env_vars" in env:
        env["env_vars"] = redact_env(env["env_vars"])
    return redact(env)


@dataclass
class StoredResult:
    """What a worker result becomes once its bytes are in the registry."""

    outputs: list[dict] = field(default_factory=list)
    arrays: list[np.ndarray] = field(default_factory=list)
    artifacts: dict = field(default_factory=dict)
    timing: dict | None = None
    per_op: list[dict] = field(default_factory=list)


_ARTIFACT_MEDIA = {
    "hlo_before": "text/x-hlo",
    "hlo_after": "text/x-hlo",
    "stablehlo": "text/x-mlir",
    "profile_trace": "application/vnd.perfetto+json+gzip",
}


def store_result(registry: Registry, result: dict, *, warmup: int) -> StoredResult:
    """Put a worker result's outputs and artifacts into the registry as blobs."""
    stored = StoredResult()
    stored.arrays = read_outputs(result)
    for leaf, arr in zip(result.get("outputs") or [], stored.arrays):
        ref = registry.put_blob_file(leaf["path"])
        stored.outputs.append({"shape": [int(d) for d in arr.shape], "dtype": leaf["dtype"], "blob": ref})
    for name, path in sorted((result.get("artifacts") or {}).items()):
        p = Path(path)
        if p.is_dir():
            if not any(p.iterdir()):
                continue
            stored.artifacts[name] = {"blob": registry.put_blob(copy_tree_to_zip_blob(p)),
                                      "media_type": "application/zip"}
        elif p.is_file():
            stored.artifacts[name] = {"blob": registry.put_blob_file(p),
                                      "media_type": _ARTIFACT_MEDIA.get(name, "application/octet-stream")}
    if result.get("samples_ns") is not None:
        stored.timing = {"warmup": int(warmup), "samples_ns": [int(s) for s in result["samples_ns"]],
                         "compile_s": float(result.get("compile_s") or 0.0)}
    stored.per_op = [{"name": str(o["name"]), "kind": str(o.get("kind", "")), "time_ns": float(o["time_ns"]),
                      "count": int(o.get("count", 0))} for o in result.get("per_op") or []]
    return stored
