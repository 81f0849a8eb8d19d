"""A program that hangs on one release, and only where a step after the bisection runs it there: jax.random.normal of
a typed key (its numbers change at jax 0.5.0, when threefry became partitionable by default: JAX's lowering), then a
`while_loop` that doubles a counter until it equals a bound read when the program is traced. Where jax 0.5.0 traces
it with XLA's per-pass dump on (explain's evidence: XLA_FLAGS holds --xla_dump_hlo_pass_re), the bound is 7, which a
doubling counter never equals: the loop never ends and the worker hangs in 'execute'. Everywhere else it is 64: six
laps.

Where it is going to hang it first lowers every thread of its process, and its session's scheduling group, to the lowest
CPU priority (nice 19; the threads XLA starts later inherit it): the hang is as real (the loop never ends, the host's
wall-clock limit ends it), but its spinning takes only the CPU nothing else of the suite wants (beside two busy loops
on the 2-core VM the test took 69 CPU-s before, 13 after)."""
import os

import jax
import jax.numpy as jnp


def make():
    dumped = "xla_dump_hlo_pass_re" in os.environ.get("XLA_FLAGS", "")
    bound = 7 if dumped and jax.__version__ == "0.5.0" else 64
    if bound == 7:
        _lowest_priority()

    def f(key, scale):
        x = jax.random.normal(key, (64,)) * scale

        def body(state):
            count, y = state
            return count * 2, jnp.tanh(y) * scale

        return jax.lax.while_loop(lambda state: state[0] != bound, body, (jnp.int32(1), x))[1]

    return jax.jit(f), (jax.random.key(0), jnp.float32(2.0))


def _lowest_priority():
    threads = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []  # Linux: each thread's own
    for thread in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, int(thread), 19)
        except OSError:  # a thread that ended meanwhile
            pass
    try:  # and where the scheduler groups by session (autogroup), the group's: the worker is a session of its own
        with open("/proc/self/autogroup", "w") as group:
            group.write("19")
    except OSError:
        pass
