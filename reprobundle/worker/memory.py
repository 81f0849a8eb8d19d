"""Memory bounded before it is spent: what a compiled module says it needs (XLA's memory analysis), what this
process may still take (the machine's MemAvailable, or the headroom under its own memory rlimit when that is lower),
and the refusal when the first does not fit in the second.

The refusal is a `MemoryRefusal` (a JobError): the job's result then has status "error" and a "limit" map of kind
"memory" with the sizes, which the host turns into its typed error (errors.MemoryLimitError)."""
from __future__ import annotations

import resource

from .protocol import JobError

MEMINFO = "/proc/meminfo"
KIND_MEMORY = "memory"


class MemoryRefusal(JobError):
    """A module or an input that cannot fit in the memory free for this worker; `limit` is the result's "limit"."""

    def __init__(self, message, limit):
        JobError.__init__(self, message)
        self.limit = limit


def mib(n):
    return "%.1f MiB" % (n / 2.0 ** 20)


def _status_kib(field):
    """A field of /proc/self/status in bytes (VmData, VmSize), None off Linux."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def mem_available():
    """MemAvailable of /proc/meminfo in bytes, None where there is none."""
    try:
        with open(MEMINFO) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_free():
    """(bytes this process may still take, what bounds it): the lower of MemAvailable and the headroom under its
    RLIMIT_DATA (VmData counts against it) or RLIMIT_AS (VmSize); (None, "") when nothing is known."""
    candidates = []
    available = mem_available()
    if available is not None:
        candidates.append((available, "MemAvailable"))
    for name, field in (("RLIMIT_DATA", "VmData"), ("RLIMIT_AS", "VmSize")):
        kind = getattr(resource, name, None)
        if kind is None:
            continue
        soft, _ = resource.getrlimit(kind)
        used = _status_kib(field)
        if soft != resource.RLIM_INFINITY and used is not None:
            candidates.append((max(0, soft - used), "the worker's memory limit, %s of %s with %s in use"
                               % (name, mib(soft), mib(used))))
    if not candidates:
        return None, ""
    return min(candidates)


def memory_needs(compiled):
    """XLA's memory analysis of a compiled module as {"argument_bytes", "output_bytes", "temp_bytes",
    "alias_bytes", "code_bytes"}, or (None, why) where this release or backend has none (jax 0.4.30 .. 0.12 have
    `Compiled.memory_analysis()`; a backend may return None or raise)."""
    analyse = getattr(compiled, "memory_analysis", None)
    if analyse is None:
        return None, "this jax has no Compiled.memory_analysis()"
    try:
        stats = analyse()
    except Exception as e:
        return None, "memory_analysis() failed: %s: %s" % (type(e).__name__, str(e)[:200])
    if stats is None:
        return None, "memory_analysis() returned nothing on this backend"
    if isinstance(stats, (list, tuple)):  # some releases give one per device
        stats = stats[0] if stats else None
        if stats is None:
            return None, "memory_analysis() returned nothing on this backend"
    names = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
             "temp_bytes": "temp_size_in_bytes", "alias_bytes": "alias_size_in_bytes",
             "code_bytes": "generated_code_size_in_bytes"}
    try:
        return dict((k, int(getattr(stats, v, 0) or 0)) for k, v in names.items()), ""
    except Exception as e:
        return None, "memory_analysis() gave no sizes: %s" % e


def check_module_fits(compiled, platform):
    """Refuse (MemoryRefusal) a compiled module whose outputs and temporaries cannot fit in the memory free now
    (its arguments are already in memory); a note (str) when the check could not be made, else None. On an
    accelerator the module's buffers are the device's, judged against its free memory where jax reports it."""
    needs, why = memory_needs(compiled)
    if needs is None:
        return "memory check skipped: %s" % why
    needed = max(0, needs["output_bytes"] - needs["alias_bytes"]) + needs["temp_bytes"]
    if platform in (None, "cpu"):
        free, bound = memory_free()
    else:
        free, bound = _device_free()
    if free is None:
        return "memory check skipped: no free-memory figure for %s" % (platform or "cpu")
    if needed <= free:
        return None
    limit = dict(needs, kind=KIND_MEMORY, needed_bytes=needed, available_bytes=int(free), bound=bound)
    raise MemoryRefusal(
        "the compiled module needs %s (outputs %s, temporaries %s, aliased %s; arguments %s already held) but only "
        "%s is free for it (%s): refused before running" % (
            mib(needed), mib(needs["output_bytes"]), mib(needs["temp_bytes"]), mib(needs["alias_bytes"]),
            mib(needs["argument_bytes"]), mib(free), bound), limit)


def check_inputs_fit(declared_bytes):
    """Refuse (MemoryRefusal) inputs whose declared sizes exceed the memory free, before any is allocated."""
    free, bound = memory_free()
    if free is None or declared_bytes <= free:
        return
    limit = {"kind": KIND_MEMORY, "needed_bytes": int(declared_bytes), "available_bytes": int(free), "bound": bound,
             "argument_bytes": int(declared_bytes)}
    raise MemoryRefusal("the inputs' declared shapes need %s but only %s is free (%s): refused before allocating "
                        "them" % (mib(declared_bytes), mib(free), bound), limit)


# What jax takes of a worker's data before any of the job's own arrays: ~130 MiB imported and ~250 MiB once XLA
# has compiled and run a small function (jax 0.4.30 .. 0.10 on 2 CPUs), plus a thread stack (8 MiB, counted by
# RLIMIT_DATA) for each thread of XLA's pools, which grow with the CPUs.
JAX_DATA_BYTES = 256 << 20
THREAD_STACK_BYTES = 8 << 20


def check_room_for_jax():
    """Refuse (MemoryRefusal) a worker whose own memory limit leaves less than jax needs to load and compile at
    all: below that, a thread XLA cannot start may abort the worker, or leave it waiting for ever."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    needed = JAX_DATA_BYTES + THREAD_STACK_BYTES * cpus
    for name, field in (("RLIMIT_DATA", "VmData"), ("RLIMIT_AS", "VmSize")):
        kind = getattr(resource, name, None)
        if kind is None:
            continue
        soft, _ = resource.getrlimit(kind)
        used = _status_kib(field) or 0
        if soft == resource.RLIM_INFINITY or name == "RLIMIT_AS" or soft - used >= needed:
            continue  # RLIMIT_AS also counts address space reserved unused: no floor says what jax needs of it
        limit = {"kind": KIND_MEMORY, "needed_bytes": needed, "available_bytes": max(0, soft - used),
                 "bound": "the worker's memory limit, %s of %s with %s in use" % (name, mib(soft), mib(used))}
        raise MemoryRefusal("the worker's memory limit of %.0f MiB (%s) leaves %s, less than the %s jax needs to "
                            "load and compile on %d CPUs: refused before importing jax"
                            % (soft / 2.0 ** 20, name, mib(max(0, soft - used)), mib(needed), cpus), limit)


def _device_free():
    try:
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        total = stats.get("bytes_limit")
        if total is None:
            return None, ""
        return int(total) - int(stats.get("bytes_in_use", 0)), "the device's memory"
    except Exception:
        return None, ""
