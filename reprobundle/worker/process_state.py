"""What only the measured process knows about the conditions of its timing: the CPUs it may run on, how many
threads it runs (XLA's intra-op pool and its libraries' spin up on the first calls), the thread settings it read."""
from __future__ import annotations

import os

# Environment variables that set XLA:CPU's and its libraries' thread counts (NPROC / PJRT_NPROC size the PJRT CPU
# client's pools on the releases that read them; the others bound OpenMP/MKL/Eigen in custom calls).
THREAD_ENV = ("XLA_FLAGS", "NPROC", "PJRT_NPROC", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def process_conditions():
    """{"cpus": [the affinity mask], "threads": threads of this process now (None off Linux), "thread_env": {...}}."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = None
    env = dict((k, os.environ[k]) for k in THREAD_ENV if k in os.environ)
    if "XLA_FLAGS" in env:  # the dump flags are the worker's own (first round only) and cost no run time
        flags = " ".join(f for f in env["XLA_FLAGS"].split() if not f.startswith("--xla_dump"))
        if flags:
            env["XLA_FLAGS"] = flags
        else:
            del env["XLA_FLAGS"]
    return {"cpus": cpus, "threads": threads, "thread_env": env}
