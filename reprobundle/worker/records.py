"""The job and the result of protocol 1 as typed records: what the host writes and this worker reads, what this
worker writes and the host reads. The package docstring says what each field means; the JSON Schemas
``reprobundle/schemas/worker-job-v1.schema.json`` and ``worker-result-v1.schema.json`` say the same for a validator,
and tests/test_worker_protocol.py holds the records, the schemas and real jobs and results to one another.

Keys a writer may leave out are in the ``total=False`` half of each record. Python 3.9 rules (the worker's oldest
interpreter): ``typing.TypedDict`` with its required part as a base class, annotations as strings."""
from __future__ import annotations

from typing import Any, Optional, TypedDict, Union

# ----------------------------------------------------------------------------------------------------------- job


class Aval(TypedDict):
    shape: list[Union[int, str]]  # a str is a symbolic dimension ("b", "2*b")
    dtype: str


class _FieldsRequired(TypedDict):
    in_avals: list[Aval]
    out_avals: list[Aval]


class Fields(_FieldsRequired, total=False):
    """An Exported's fields (describe.exported_fields); what is left out is what an unsharded, effect-free function
    has (rebuild.py)."""

    fun_name: str
    platforms: list[str]
    nr_devices: int
    in_shardings_hlo: list[Optional[str]]
    out_shardings_hlo: list[Optional[str]]
    calling_convention_version: int
    ordered_effects: list[str]
    unordered_effects: list[str]
    disabled_safety_checks: list[str]
    module_kept_var_idx: list[int]
    uses_global_constants: bool


class JobFunction(TypedDict):
    """Paths of the bundle's files of the function (None: the bundle lacks it), and its fields."""

    exported: Optional[str]
    mlir_module: Optional[str]
    mlir_module_compat: Optional[str]
    stablehlo_text: Optional[str]
    fields: Optional[Fields]


class _SyntheticRequired(TypedDict):
    distribution: str
    seed: int


class Synthetic(_SyntheticRequired, total=False):
    """synthetic.synthetic_array's spec."""

    low: float
    high: float
    minval: float
    maxval: float
    mean: float
    std: float
    stddev: float


class _InputLeafRequired(TypedDict):
    shape: list[int]
    dtype: str


class InputLeaf(_InputLeafRequired, total=False):
    """One flat input leaf: its raw C-order bytes at ``path``, or ``synthetic`` data."""

    path: str
    synthetic: Synthetic
    key_path: str  # what a retrace checks the factory's call against


class _TimingRequired(TypedDict):
    warmup: int
    repeat: int


class Timing(_TimingRequired, total=False):
    lockstep: bool


class Settings(TypedDict, total=False):
    """A contender's own settings (settings.py)."""

    xla_flags: list[str]
    jax_config: dict[str, str]
    env: dict[str, str]


class _ProgramRequired(TypedDict):
    dir: str
    script: str


class Program(_ProgramRequired, total=False):
    """A retrace's program (retrace.py)."""

    factory: str
    static: list[Union[int, str]]
    cache: str


class _JobRequired(TypedDict):
    protocol: int
    function: JobFunction
    inputs: list[InputLeaf]
    outputs_dir: str
    artifacts_dir: str


class Job(_JobRequired, total=False):
    timing: Timing
    dump: bool
    profile: bool
    profile_iters: int
    brief_environment: bool
    routes: Optional[list[str]]
    describe: bool
    mode: str  # "frozen" | "retrace"
    program: Program
    settings: Settings
    compile_options: dict[str, Union[bool, int, float, str]]  # XLA DebugOptions fields for this job's compile only
    platform: Optional[str]
    memory_check: bool


# -------------------------------------------------------------------------------------------------------- result


class _AttemptRequired(TypedDict):
    route: str
    error: str
    stage: str  # "skipped" | "load" | "lower" | "compile"


class Attempt(_AttemptRequired, total=False):
    skipped: bool


class _StablehloVersionsRequired(TypedDict):
    current: str
    minimum: str


class StablehloVersions(_StablehloVersionsRequired, total=False):
    week_4: str
    week_12: str


class Stablehlo(TypedDict, total=False):
    """The StableHLO versions of this jaxlib and of the artifacts the routes read."""

    jaxlib: StablehloVersions
    jaxlib_error: str
    exported_flatbuffer: dict[str, Any]  # flatbuffer.exported_flatbuffer_info
    exported_module: Optional[str]
    mlir_module: Optional[str]
    mlir_module_compat: Optional[str]


class Device(TypedDict):
    id: int
    kind: str
    platform: str


class ProcessConditions(TypedDict):
    cpus: list[int]
    threads: Optional[int]
    thread_env: dict[str, str]


class DeviceMemory(TypedDict):
    peak_bytes: int
    limit_bytes: int


class Environment(TypedDict, total=False):
    """What the run ran on (environment.py, process_state.py); empty when the job could not even be read."""

    python: str
    python_full: str
    numpy: str
    ml_dtypes: Optional[str]
    os: str
    machine: str
    cpu_model: Optional[str]
    cpu_flags: list[str]
    cpu_count: Optional[int]
    env_vars: dict[str, str]
    packages: dict[str, str]
    jax: str
    jaxlib: Optional[str]
    platform: Optional[str]
    backend: Optional[str]
    backend_error: str
    devices: list[Device]
    device_kind: str
    device_count: int
    platform_version: Optional[str]
    jax_config: dict[str, Any]
    accelerator: dict[str, Any]
    platform_flags: dict[str, Any]
    device_memory: DeviceMemory
    process: ProcessConditions


class LoadedFunction(TypedDict):
    fun_name: str
    nr_devices: int
    platforms: list[str]
    calling_convention_version: int


class OutputLeaf(TypedDict):
    shape: list[int]
    dtype: str
    path: str


class Artifacts(TypedDict, total=False):
    """Paths of the artifacts that were produced."""

    stablehlo_lowered: str
    stablehlo_retraced: str
    hlo_before: str
    hlo_after: str
    xla_dump: str
    profile_dir: str
    profile_trace: str


class PerOpRow(TypedDict):
    name: str
    kind: str
    time_ns: float  # wall time per call
    event_ns: float  # summed event time per call
    count: int
    total_count: int
    op_name: Optional[str]


class Profile(TypedDict, total=False):
    iterations: int
    traced_wall_ns: int
    source: Optional[str]
    module: Optional[str]
    note: Optional[str]
    attributed_ns: float
    event_ns: float
    async_ops: list[str]


class Description(TypedDict):
    """What a describe job stores for a function the host cannot deserialize itself (job.Worker.describe)."""

    fields: Fields
    in_tree: dict[str, Any]
    out_tree: dict[str, Any]
    serialization_version: Optional[int]
    mlir_module: str
    stablehlo_text: str
    mlir_module_compat: Optional[str]


class _LimitRequired(TypedDict):
    kind: str  # "memory"
    needed_bytes: int
    available_bytes: int
    bound: str  # what bounds the memory free: MemAvailable, the worker's rlimit, the device's memory


class Limit(_LimitRequired, total=False):
    """A limit the job would have gone past, so it was refused before running (memory.MemoryRefusal)."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    code_bytes: int


class _ResultRequired(TypedDict):
    protocol: int
    status: str  # "ok" | "incompatible" | "error"
    reason: str
    route: Optional[str]
    attempts: list[Attempt]
    notes: list[str]
    environment: Environment
    compile_s: Optional[float]
    samples_ns: list[int]
    outputs: list[OutputLeaf]
    artifacts: Artifacts
    per_op: list[PerOpRow]


class Result(_ResultRequired, total=False):
    stablehlo: Stablehlo
    function: LoadedFunction
    profile: Optional[Profile]
    phase_s: dict[str, float]
    description: Description
    detail: str  # internal worker errors only: the traceback
    phase: str  # provisional results only: the phase the worker was in
    limit: Limit  # a job refused because it would not fit (worker/memory.py)
