"""What a captured program hands to reprobundle: options in, reports and staged captures out, as plain files.

`reprobundle capture -- python train.py` runs the program in a child process; the hook inside it (hook.py) and
the launcher outside (program_launch.py) share one temporary session folder and nothing else:

    proc-<pid>.json              per Python process that loaded the hook: its interpreter, JAX version, the
                                 computations it saw (rows) and any problem; rewritten atomically
    captures/<pid>-<n>/          one staged capture, renamed into place when complete, so a half-written one
                                 never shows: capture.json (function, call, signature, exported fields, trees,
                                 input leaves as {file, shape, dtype}) and raw files (the jax.export flatbuffer,
                                 the StableHLO artifacts, one C-order .bin per input leaf)

Options travel in the child's environment (REPROBUNDLE_CAPTURE, JSON). Everything is JSON or raw bytes,
nothing that could run code. The module needs only the standard library and numpy (no JAX), so both sides use it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CorruptBundleError, UsageError

ENV_OPTIONS = "REPROBUNDLE_CAPTURE"
ENV_ROOT = "REPROBUNDLE_CAPTURE_ROOT"  # folder holding the reprobundle package, for interpreters that lack it
STAGING_FORMAT = 1
_META = "capture.json"
_BYTES_FIELDS = ("serialized", "mlir_module", "mlir_module_compat")


@dataclass(frozen=True)
class CaptureOptions:
    """What to capture. `match` is a regular expression searched in a function's qualified name, module and jit
    name; `call` is the call (per signature) to capture, None for the first call after the one that compiled
    (the compiling call when there is no other); `top` keeps the K most expensive computations (timed);
    `listing` captures nothing and times every call."""

    match: str | None = None
    call: int | None = None
    top: int | None = None
    all_signatures: bool = False
    listing: bool = False

    @property
    def timing(self) -> bool:
        """Whether every seen call is timed with block_until_ready (listing and --top only)."""
        return self.listing or self.top is not None

    @property
    def capturing(self) -> bool:
        return not self.listing and (self.match is not None or self.top is not None)

    def check(self) -> "CaptureOptions":
        if self.match is not None:
            try:
                re.compile(self.match)
            except re.error as e:
                raise UsageError(f"--match {self.match!r} is not a regular expression: {e}",
                                 hint="e.g. --match train_step or --match 'train|eval'") from None
        if self.call is not None and (not isinstance(self.call, int) or self.call < 1):
            raise UsageError(f"invalid call number {self.call!r}", hint="calls are counted from 1")
        if self.top is not None and (not isinstance(self.top, int) or self.top < 1):
            raise UsageError(f"invalid --top {self.top!r}", hint="--top K takes K >= 1")
        if not self.listing and self.match is None and self.top is None:
            raise UsageError("nothing to capture", hint="pass --match REGEX, --top K, or --list to only list the "
                                                        "jitted computations")
        if self.listing and (self.call is not None or self.all_signatures):
            raise UsageError("--call and --all-signatures choose what to capture, and --list captures nothing",
                             hint="drop --list to capture, or drop --call/--all-signatures to list")
        return self

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "CaptureOptions":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def child_config(options: CaptureOptions, directory: str | Path) -> str:
    """The REPROBUNDLE_CAPTURE value for a child process."""
    return json.dumps({"format": STAGING_FORMAT, "dir": str(directory), "options": options.to_json()})


def parse_child_config(text: str) -> tuple[CaptureOptions, Path]:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != STAGING_FORMAT:
        raise UsageError("REPROBUNDLE_CAPTURE was written by another reprobundle version")
    return CaptureOptions.from_json(data["options"]), Path(data["dir"])


@dataclass
class Staged:
    """One captured call: the exported function (capture.export.ExportedFunction) and its input leaves, copied
    before the call ran (so donation cannot touch them), with where it came from."""

    id: str
    function: dict  # name, module, jit_name, location, via, key
    signature: int  # 1-based index of the signature among the function's signatures, in order of first call
    call: int  # the call of that signature that was captured (1 = the call that compiled it)
    args: list[dict]  # per top-level argument: {"name", "text"}
    exported: Any  # ExportedFunction
    leaves: list  # numpy arrays
    jax_version: str
    python: str
    pid: int
    note: str = ""
    source: str | None = None
    costs: dict = field(default_factory=dict)  # seconds: export, copy, write

    def summary(self) -> dict:
        """Plain data for reports (everything but the export and the arrays)."""
        return {"id": self.id, "function": self.function, "signature": self.signature, "call": self.call,
                "args": self.args, "jax_version": self.jax_version, "python": self.python, "pid": self.pid,
                "note": self.note, "costs": self.costs,
                "input_bytes": int(sum(int(getattr(x, "nbytes", 0)) for x in self.leaves))}


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_staged(root: Path, staged: Staged) -> Path:
    """Write a staged capture under root/captures/, renamed into place once every file is written."""
    import time

    import numpy as np

    t0 = time.perf_counter()
    captures = Path(root) / "captures"
    captures.mkdir(parents=True, exist_ok=True)
    final = captures / staged.id
    tmp = captures / f".{staged.id}.tmp"
    tmp.mkdir(parents=True, exist_ok=False)
    fn = staged.exported
    files = {}
    for name in _BYTES_FIELDS:
        value = getattr(fn, name)
        if value is not None:
            (tmp / f"{name}.bin").write_bytes(bytes(value))
            files[name] = f"{name}.bin"
    (tmp / "stablehlo.mlir").write_text(fn.stablehlo_text)
    leaves = []
    for i, leaf in enumerate(staged.leaves):
        arr = np.asarray(leaf)  # (np.ascontiguousarray would make a 0-d array 1-d)
        np.ascontiguousarray(arr).reshape(-1).view(np.uint8).tofile(tmp / f"input-{i}.bin")
        leaves.append({"file": f"input-{i}.bin", "shape": [int(d) for d in arr.shape], "dtype": arr.dtype.name})
    exported = {f.name: getattr(fn, f.name) for f in dataclasses.fields(fn)
                if f.name not in _BYTES_FIELDS + ("stablehlo_text",)}
    staged.costs["write_s"] = round(time.perf_counter() - t0, 6)
    meta = {"format": STAGING_FORMAT, **staged.summary(), "source": staged.source, "exported": exported,
            "files": files, "leaves": leaves}
    (tmp / _META).write_text(json.dumps(meta))
    os.rename(tmp, final)
    return final


def staged_dirs(root: Path) -> list[Path]:
    """The complete staged captures under a session folder, oldest first."""
    captures = Path(root) / "captures"
    if not captures.is_dir():
        return []
    found = [p for p in captures.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / _META).is_file()]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


def read_staged_summary(path: Path) -> dict:
    try:
        meta = json.loads((Path(path) / _META).read_text())
    except (OSError, ValueError) as e:
        raise CorruptBundleError(f"staged capture {path} is unreadable: {e}") from None
    if meta.get("format") != STAGING_FORMAT:
        raise CorruptBundleError(f"staged capture {path} has format {meta.get('format')!r}")
    return meta


def read_staged(path: Path) -> Staged:
    """A staged capture back, its input leaves memory-mapped (packing reads each once)."""
    import numpy as np

    from ..worker.dtypes import np_dtype
    from .export import ExportedFunction

    path = Path(path)
    meta = read_staged_summary(path)
    values = dict(meta["exported"])
    for name in _BYTES_FIELDS:
        values[name] = (path / meta["files"][name]).read_bytes() if name in meta["files"] else None
    values["stablehlo_text"] = (path / "stablehlo.mlir").read_text()
    exported = ExportedFunction(**values)
    leaves = []
    for spec in meta["leaves"]:
        dtype = np_dtype(spec["dtype"])
        shape = tuple(spec["shape"])
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize == 0:
            leaves.append(np.zeros(shape, dtype))
        else:
            leaves.append(np.memmap(path / spec["file"], dtype=dtype, mode="r", shape=shape))
    return Staged(id=meta["id"], function=meta["function"], signature=meta["signature"], call=meta["call"],
                  args=meta["args"], exported=exported, leaves=leaves, jax_version=meta["jax_version"],
                  python=meta["python"], pid=meta["pid"], note=meta.get("note", ""), source=meta.get("source"),
                  costs=meta.get("costs") or {})


def write_report(root: Path, pid: int, report: dict) -> None:
    Path(root).mkdir(parents=True, exist_ok=True)
    _atomic_write(Path(root) / f"proc-{pid}.json", json.dumps({"format": STAGING_FORMAT, **report}).encode())


def read_reports(root: Path) -> list[dict]:
    """The reports of every process that loaded the hook, by pid."""
    reports = []
    for path in sorted(Path(root).glob("proc-*.json")):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            reports.append({"pid": path.stem[5:], "error": f"unreadable report {path.name}"})
    return reports
