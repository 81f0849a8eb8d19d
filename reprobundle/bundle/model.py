"""The typed model of a bundle's manifest and a run record: what the JSON Schemas describe, for the type checker.

Manifests and run records stay plain maps on the wire and in memory (they are hashed as canonical msgpack, and
`--json` prints them); these TypedDicts give the code that reads them names and types, checked by mypy. The codec
(`manifest.decode_manifest`, `decode_run`) validates a map against its schema and only then returns it as one of
these types, so a value typed `Manifest` has passed `schemas/manifest-v3.schema.json`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from ..worker.protocol import ROUTES

RunStatus = Literal["ok", "mismatch", "incompatible", "error", "crashed", "timeout"]


class Blob(TypedDict):
    digest: str  # sha256:<64 hex>
    size: int


class Aval(TypedDict):
    shape: list[int | str]  # a str is a symbolic dimension ("b", "2*b")
    dtype: str


class Synthetic(TypedDict):
    distribution: Literal["normal", "uniform", "randint", "zeros", "ones"]
    seed: int
    low: NotRequired[float]
    high: NotRequired[float]
    mean: NotRequired[float]
    std: NotRequired[float]


class InputLeaf(TypedDict):
    shape: list[int]
    dtype: str
    blob: NotRequired[Blob]  # exactly one of blob and synthetic
    synthetic: NotRequired[Synthetic]
    path: NotRequired[str]  # key path in the user's (args, kwargs)
    key_impl: NotRequired[str]  # a typed PRNG key of this impl, stored as key data


class OutputLeaf(TypedDict):
    shape: list[int]
    dtype: str
    blob: Blob


class LeafName(TypedDict):
    path: str
    key_impl: NotRequired[str]


class StaticValue(TypedDict):
    path: str
    type: str
    repr: str


class Tree(TypedDict):
    kind: Literal["leaf", "static", "none", "tuple", "list", "dict", "custom"]
    children: NotRequired[list[Tree]]
    keys: NotRequired[list[Any]]
    type: NotRequired[str]


class Fields(TypedDict):
    """What rebuilds a jax.export.Exported without its flatbuffer."""

    fun_name: str
    in_avals: list[Aval]
    out_avals: list[Aval]
    platforms: list[str]
    nr_devices: int
    in_shardings_hlo: list[str | None]
    out_shardings_hlo: list[str | None]
    calling_convention_version: int
    ordered_effects: list[str]
    unordered_effects: list[str]
    disabled_safety_checks: list[str]
    module_kept_var_idx: list[int]
    uses_global_constants: bool


class SourceFile(TypedDict):
    path: str  # relative to the program's root, the script's folder
    blob: Blob


class Program(TypedDict):
    """Manifest 3: what a retrace runs in the environment under test (capture/source.py)."""

    script: str
    factory: str
    files: list[SourceFile]
    packages: dict[str, str]  # distribution -> version when packed
    skipped: NotRequired[list[dict[str, str]]]
    static: NotRequired[list[int | str]]


class Function(TypedDict):
    kind: Literal["jax.export", "stablehlo"]
    fields: Fields
    in_tree: Tree
    out_tree: Tree
    exported: NotRequired[Blob | None]
    mlir_module: NotRequired[Blob | None]
    mlir_module_compat: NotRequired[Blob | None]
    stablehlo_text: NotRequired[Blob | None]
    source: NotRequired[Blob | None]
    serialization_version: NotRequired[int]
    outputs: NotRequired[list[LeafName]]
    static: NotRequired[list[StaticValue]]
    program: NotRequired[Program]  # manifest 3
    traced_by: NotRequired[dict[str, str]]  # manifest 3: {"jax": the release that traced the stored program}


class Inputs(TypedDict):
    leaves: list[InputLeaf]


class TimingRecord(TypedDict):
    """The timing a run record (or a manifest's reference) keeps; run/execution.Timing is what a replay asks for."""

    warmup: int
    samples_ns: list[int]
    compile_s: float
    steps: NotRequired[list[int]]  # calls per step (run records measured interleaved)
    rounds: NotRequired[list[int]]  # steps per round, a fresh worker process each
    group: NotRequired[str]  # shared by the runs timed together


class PerOp(TypedDict):
    name: str
    kind: str
    time_ns: float
    count: int


class Reference(TypedDict):
    outputs: list[OutputLeaf]
    timing: TimingRecord
    route: str
    per_op: NotRequired[list[PerOp]]


class Artifact(TypedDict):
    blob: Blob
    media_type: str


class Tool(TypedDict):
    name: str
    version: str


class Manifest(TypedDict):
    format: Literal["reprobundle-bundle"]
    format_version: int
    name: str
    version: int
    created: str
    description: str
    labels: dict[str, str]
    parent: str | None
    tool: Tool
    function: Function
    inputs: Inputs
    reference: Reference
    environment: dict[str, Any]  # free-form and redacted: read it as data of any type
    artifacts: dict[str, Artifact]


class RunRecord(TypedDict):
    format: Literal["reprobundle-run"]
    format_version: int
    run_id: str
    bundle_id: str
    bundle: str
    created: str
    requested: str
    status: RunStatus
    reason: str
    environment: dict[str, Any]
    outputs: list[OutputLeaf]
    check: dict[str, Any] | None
    artifacts: dict[str, Artifact]
    route: NotRequired[str | None]
    timing: NotRequired[TimingRecord]
    per_op: NotRequired[list[PerOp]]
    attempts: NotRequired[list[Any]]
    duration_s: NotRequired[float]
    spent: NotRequired[dict[str, float]]  # seconds by category (run/spent.py); 2026-12-03 on
    labels: NotRequired[dict[str, str]]
    notes: NotRequired[list[str]]  # run 3: what the worker adjusted to run on that release
    group: NotRequired[str]  # run 3: shared by the runs of one replay, timed or not
    contender: NotRequired[dict[str, Any]]  # run 4: {jax, mode, settings, label} (run/contenders.py)


def release_of(run: dict[str, Any] | RunRecord) -> str:
    """The JAX release a run ran: its environment's jax, else its contender's ("" when neither says)."""
    return str((run.get("environment") or {}).get("jax") or (run.get("contender") or {}).get("jax") or "")


def commit_of_run(run: dict[str, Any] | RunRecord) -> str | None:
    """The JAX commit a run's environment was built from (JAX's Python at a commit: its `jax_build`), or None for
    a release's. A release's wheel records the commit it was built from too (jax.version._git_hash, from 0.10 on):
    a run whose JAX calls itself a plain release (no .dev, no +local part) is the release's."""
    environment = run.get("environment") or {}
    build = environment.get("jax_build")
    commits = build.get("commits") if isinstance(build, dict) else None
    found = commits.get("jax") if isinstance(commits, dict) else None
    return str(found) if found and not _a_release(str(environment.get("jax") or "")) else None


def _a_release(version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return not (parsed.is_devrelease or parsed.is_prerelease or parsed.local)


def named_label(run: dict[str, Any] | RunRecord) -> str:
    """run_label with the path of a commit's environment (JAX's Python at a commit, in a temporary folder of
    bisect-commits) replaced by the JAX version its run records (`0.11.0.dev0+0145058aaca8 retraced`)."""
    requested = str(run.get("requested") or "")
    label, jax = str((run.get("contender") or {}).get("label") or requested), (run.get("environment") or {}).get("jax")
    if "/" in requested and jax and commit_of_run(run) is not None and label.startswith(requested):
        return str(jax) + label[len(requested):]
    return label


def run_label(run: dict[str, Any] | RunRecord) -> str:
    """How a run's contender is named in comparisons and reports: `0.8.0`, `0.8.0 retraced`,
    `0.8.0 [XLA_FLAGS=...]` (run 4's contender label), else the version it requested (runs before format 4)."""
    return str((run.get("contender") or {}).get("label") or run["requested"])


def run_notes(run: dict[str, Any] | RunRecord) -> list[str]:
    """The worker's notes of a run, each once, without those of a route that did not load it: a route that failed
    after adjusting the module (a calling convention above the release's range) noted the same as the route that
    loaded it, and its failure is in the run's attempts."""
    loaded = run.get("route")
    notes: list[str] = []
    for note in run.get("notes") or []:
        if not isinstance(note, str):
            continue
        route, said, _ = note.partition(": ")
        if (said and route in ROUTES and route != loaded) or note in notes:
            continue
        notes.append(note)
    return notes
