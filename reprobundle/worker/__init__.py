"""reprobundle replay worker: replays one exported JAX function in *this* environment.

This package is self-contained.  Every replay environment runs it by path, so it
imports only the standard library, numpy, msgpack (lazily) and jax/jaxlib/ml_dtypes
(lazily, inside functions), and nothing of the host package.  It runs unchanged on
JAX 0.4.30 .. 0.12.x and Python 3.9 .. 3.13.  Importing it does NOT import jax, so
the host may ``from reprobundle.worker.synthetic import synthetic_array`` freely.

Modules: ``protocol`` (constants, errors, helpers), ``records`` (the job and the result as typed records),
``dtypes``, ``synthetic``,
``flatbuffer``, ``stablehlo`` (portable artifacts), ``describe`` (Exported as data),
``signature`` (@main's signature from StableHLO text), ``rebuild`` (an Exported from its fields),
``kernels`` (jaxlib CPU custom calls), ``environment``, ``routes`` (load routes),
``timing``, ``trace`` (per-op table), ``conditions`` (the process's CPUs and threads),
``memory`` (what a module needs, what is free, the refusal),
``hlo_kind`` (the kind of an HLO instruction, which the host's analysis shares), ``flatten``
(a pytree call as the flat function jax.export sees, shared with the host's pack), ``retrace`` (the
retrace route: the bundle's program traced by this release), ``job``
(one job), ``serve`` (a long-lived worker of StableHLO modules, one after another), ``shared`` (one lockstep
process serving several jobs: ``python worker jobs FOLDER``), ``ending`` (a job's result whatever happens),
``main`` (entry points).

Invocation
==========

    python path/to/reprobundle/worker JOB.msgpack RESULT.msgpack

Both files are msgpack maps (packed with ``use_bin_type=True``, read with
``raw=False``).  Their JSON Schemas, ``reprobundle/schemas/worker-job-v1.schema.json`` and
``worker-result-v1.schema.json``, and their typed records in ``records.py`` (``Job``, ``Result``) are the
definitions; tests/test_worker_protocol.py holds them to each other and to real jobs and results.  What each
field means is below.  Bulk bytes are referenced by absolute path.  Exit code is 0
whenever RESULT was written (whatever the status); 2 on bad command line.
A provisional result (status "error", reason "worker process ended abnormally
during <phase>") is written before each risky phase, so a hard crash (segfault,
OOM kill, host timeout) still leaves a result that names the phase (also in its
"phase" field, which only provisional results have).

Job (protocol 1)
----------------
::

  { "protocol": 1,
    "function": {
      "exported": path|None,            # bytes of jax.export.Exported.serialize() (flatbuffer)
      "mlir_module": path|None,         # Exported.mlir_module_serialized as the packing JAX wrote it
      "mlir_module_compat": path|None,  # same module as a portable artifact at the OLDEST StableHLO
                                        #   version the packing jaxlib can write; produce it on the
                                        #   host with serialize_compat_artifact(exported)
      "stablehlo_text": path|None,      # MLIR text of the module (e.g. exp.mlir_module(), or a raw
                                        #   `pack --stablehlo module.mlir` file)
      "fields": {...}|None },           # see exported_fields(); needed for the rebuild routes,
                                        #   optional for stablehlo-text (derived from @main then)
    "inputs": [ {"shape": [int], "dtype": str, "path": str}            # raw C-order bytes
              | {"shape": [int], "dtype": str,
                 "synthetic": {"distribution": ..., "seed": int, ...}} ],  # see synthetic_array()
              # flat leaves in the order of the exported function's flattened in_tree; each may carry
              # "key_path" (the leaf's key path, which a retrace checks the factory's call against)
    "outputs_dir": str,                 # output leaf i -> outputs_dir/out_<i>.bin (raw C-order)
    "artifacts_dir": str,               # hlo text, xla_dump/, profile/ go here
    "timing": {"warmup": int, "repeat": int,
               "lockstep": bool},      # optional (default false): the host drives the timed calls,
                                        #   see "Lockstep timing" below; "repeat" is then ignored
    "dump": bool,                       # XLA dump of the compile into artifacts_dir/xla_dump/
    "profile": bool,                    # profiler trace + per-op table
    "profile_iters": int,               # optional (default 3): iterations inside the trace
    "brief_environment": bool,          # optional (default false): no "packages" list (the host keeps
                                        #   only the first round's environment)
    "routes": [str]|None,               # optional: restrict/order the load routes (tests)
    "describe": bool,                   # optional (default false): also describe the loaded Exported as data
                                        #   (result "description": what the host stores when it packs on
                                        #   another JAX than its own)
    "mode": "frozen"|"retrace",         # optional (default "frozen"): the stored program, or the bundle's
                                        #   source traced and lowered by this environment's jax (route
                                        #   "retrace", see retrace.py; its StableHLO is the artifact
                                        #   "stablehlo_retraced")
    "program": {"dir", "script", "factory", "static", "cache"},  # with mode "retrace": see retrace.py
    "settings": {"xla_flags": [str],    # optional: this contender's own settings, applied before jax
                 "jax_config": {str: str},  #   is imported (XLA_FLAGS appended, environment variables set)
                 "env": {str: str}},    #   or before the function loads (jax.config.update)
    "compile_options": {str: bool|int|float|str},  # optional: XLA DebugOptions fields set for this job's compile
                                        #   only (Lowered.compile(options)), so that jobs of one process can
                                        #   differ in flags XLA reads at compile (explain's experiments)
    "memory_check": bool,               # optional (default true): refuse inputs whose declared sizes and a
                                        #   compiled module whose outputs and temporaries (XLA's memory analysis)
                                        #   exceed the memory free (memory.py)
    "platform": str|None }              # optional: "cpu", "cuda", "rocm", "tpu": JAX_PLATFORMS is set to it
                                        #   before jax is imported (on a GPU also XLA_PYTHON_CLIENT_PREALLOCATE=
                                        #   false), and the job fails unless jax runs there

``fields``: ``fun_name`` str, ``in_avals``/``out_avals`` [{"shape": [int], "dtype": str}],
``platforms`` [str], ``nr_devices`` int, ``in_shardings_hlo``/``out_shardings_hlo``
[str|None], ``calling_convention_version`` int, ``ordered_effects``/``unordered_effects``
[str], ``disabled_safety_checks`` [str] ("platform", "shape_assertions",
"custom_call:<target>"), ``module_kept_var_idx`` [int], ``uses_global_constants`` bool.

Dtype strings are numpy names ("float32", "bfloat16", "int32", "bool",
"float8_e4m3fn", ...); ml_dtypes types by their ml_dtypes name.

Result (protocol 1)
-------------------
::

  { "protocol": 1, "status": "ok" | "incompatible" | "error",
    "reason": str,                 # precise and human readable, never a traceback
    "route": str|None,             # "deserialize" | "rebuild" | "rebuild-compat" | "stablehlo-text" | "retrace"
    "attempts": [{"route", "error", "stage", "skipped"?}],
                                   # every route considered before the one that worked, in order;
                                   # stage: how far it got: "skipped" (bundle lacks that file),
                                   # "load", "lower", "compile"; skipped ones also carry skipped=True
    "notes": [str],                # adjustments made: calling convention clamped, override flags,
                                   #   logging shim, newer-than-current artifact accepted, x64, ...
    "stablehlo": {"jaxlib": {"current", "minimum", "week_4", "week_12"},
                  "exported_flatbuffer": {...header, see exported_flatbuffer_info...},
                  "exported_module" | "mlir_module" | "mlir_module_compat": version str},
    "environment": {"python", "jax", "jaxlib", "numpy", "ml_dtypes",
                    "platform" (the lowering platform: cpu, cuda, rocm, tpu), "backend" (jax's name: gpu),
                    "device_kind", "device_count", "accelerator" ({driver, cuda_runtime, cudnn, cublas,
                    compute_capability, memory_limit_bytes, packages...}; accelerators only),
                    "platform_flags" (XLA_FLAGS, LIBTPU_INIT_ARGS, NCCL_/TPU_/CUDA_ variables), "device_memory",
                    "platform_version", "devices": [{"id", "kind", "platform"}], "os", "machine",
                    "cpu_model", "cpu_flags", "cpu_count", "env_vars", "packages", "jax_config",
                    "process": {"cpus": [int], "threads": int|None, "thread_env": {}}},
                                   # process: after the timed calls (process_state.py): its affinity mask,
                                   #   its threads (XLA's pools are up), the thread settings it read
    "function": {"fun_name", "nr_devices", "platforms", "calling_convention_version"},  # when loaded
    "compile_s": float|None,       # lowered.compile() wall time
    "samples_ns": [int],           # per call: compiled(*args) + block_until_ready, after warmup
    "outputs": [{"shape", "dtype", "path"}],
    "artifacts": {"stablehlo_lowered", "hlo_before", "hlo_after", "xla_dump", "profile_dir",
                  "profile_trace"},                # only those that were produced (paths)
    "per_op": [{"name", "kind", "time_ns", "event_ns", "count", "total_count", "op_name"}],
                                   # name: HLO instruction (usually a fusion) of the optimized module;
                                   # kind: opcode, "fusion(kLoop)", "fusion(kCustom:__ynn_fusion)",
                                   #   "custom-call(target)"; time_ns: its share of the wall time per
                                   #   iteration (trace.py); event_ns: its summed event time per iteration;
                                   # count: events per iteration; op_name: jax op metadata
    "profile": {"iterations", "traced_wall_ns", "source", "module", "note", "attributed_ns", "event_ns",
                "async_ops"}|None,
    "phase_s": {phase: seconds},   # and "calibrate": the warm-up calls, within "timing"
    "description": {...},          # only when the job asked to describe (records.Description)
    "limit": {"kind": "memory", "needed_bytes", "available_bytes", "bound", "argument_bytes", "output_bytes",
              "temp_bytes", "alias_bytes", "code_bytes"},  # only when refused as too large (memory.py)
    "detail": str }                # only for internal worker errors: the traceback, for debugging

Sequence: load inputs -> route loop (build Exported, check inputs vs in_avals,
lower, compile; first route that compiles wins) -> one call whose outputs are
written -> ``warmup`` untimed calls -> ``repeat`` timed calls -> (profile) a
separate traced run of ``profile_iters`` calls.

Lockstep timing
---------------
With ``timing.lockstep`` the host times several workers (JAX versions) in
alternation, so that the machine's drift hits them alike.  The worker keeps its
original stdout as a private control channel (fd 1 then points at stderr, so
nothing else can write into it) and reads commands from stdin, one ASCII line each:

  worker -> host   ``ready <ns>`` after the warmup calls; <ns> is the median warmup call
  host -> worker   ``time <n>``   make n timed calls
  worker -> host   ``<ns> <ns> ...`` their n times
  host -> worker   end of stdin (or ``finish``): go on to profile, write the result, exit

Every timed call also lands in ``samples_ns``, in order. ``shared`` speaks the same lines for several jobs of
one process, each command naming its job (see its docstring).

Status: "incompatible" when no route could load+lower+compile the function;
"error" for bad jobs/inputs (e.g. input leaf shape/dtype mismatch, which names
the leaf index, expected and actual), execution failures, or internal errors.

Why plain ``deserialize(...).call(...)`` fails from a newer to an older JAX
------------------------------------------------------------------------------
* The flatbuffer: jax <= 0.8 accepts serialization versions [2, 3] only
  (0.4.30: exactly 2); 0.12 writes 12.  jax 0.10 writes "3" although its
  schema moved nr_devices to a 32-bit field, so 0.7/0.8 *misread* it as
  nr_devices=0 - the worker cross-checks the decoded Exported against
  ``fields`` and rejects such reads.  The other way, jax 0.12 refuses version-2
  flatbuffers (older than its 6-month window) unless
  ``jax_export_deserialize_expired_versions`` is set, which the worker does
  (and says so in ``notes``).
* The StableHLO artifact: jax writes it at the "4 weeks old" StableHLO version
  (1.12.1 for jax 0.7/0.8, 1.15.0 for 0.10, 1.18.0 for 0.12), but jaxlib 0.4.30
  reads up to 1.1.3 ("Failed to deserialize StableHLO").  Every jaxlib from
  0.4.30 to 0.12 can still *write* 0.9.0, hence ``mlir_module_compat``
  (re-serialization is exact or fails; VHLO versions every semantic change).
* calling_convention_version: 0.12 exports 10, jax 0.4.30 supports only 9;
  10 differs from 9 only by propagating use_shardy_partitioner to
  tf.XlaCallModule, so the rebuild routes use 9 there (noted).
* jax 0.4.30's jax.export imports absl-py, which it does not declare; the worker
  substitutes a stdlib-logging stand-in when absl is missing (noted).
* jaxlib's CPU kernels (LAPACK: cholesky, qr, eigh, svd, lu, triangular_solve...)
  are custom calls.  jax 0.4.30 .. 0.9 initialize the LAPACK ones
  (``jaxlib.cpu._lapack.initialize()``) only while lowering a linalg op, never
  in a replay, whose call then dies by SIGSEGV; jaxlib 0.4.30 also registers its
  one typed-FFI kernel (``lapack_?potrf_ffi``) under the untyped API.  The worker
  does both before compiling (noted), and a kernel the jaxlib lacks (0.4.30 has
  no ``*_ffi`` but potrf; 0.7+ none of the pre-FFI ones) makes the route fail at
  "compile", naming it (see ``prepare_kernels``).

Public helpers for the host (all importable without jax being imported):
``synthetic.synthetic_array``, ``dtypes.np_dtype``, ``stablehlo.serialize_compat_artifact``,
``describe.exported_fields``, ``stablehlo.portable_artifact_version``,
``flatbuffer.exported_flatbuffer_info``, ``stablehlo.strip_mlir_locations``,
``main.run_job``, ``main.main``.
"""
