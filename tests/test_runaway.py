"""A bundle is data, but its XLA program runs: a program that never returns, or one that needs more memory than
there is, ends alone as its contender's clear error (issue #29, items 3 and 4).

- Phase limits: a `while` loop whose condition stays true ends at the limit of the phase it is in, named with the
  limit; the contender timed with it still measures. The default call limit follows the reference's own times.
- Memory: a module whose output cannot fit in the worker's memory is refused before running, with the sizes
  (XLA's memory analysis); with that check off, the worker's memory limit (RLIMIT_DATA) ends it alone.
- Input shapes that lie about their blob are a typed error before anything is allocated.
"""

from __future__ import annotations

import copy
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import reprobundle
from reprobundle.bundle.registry import Registry
from reprobundle.errors import CorruptBundleError, MemoryLimitError, PhaseLimitError
from reprobundle.run.execution import (
    MEMORY_FLOOR_BYTES,
    RUNAWAY_FACTOR,
    RUNAWAY_GRACE_S,
    PhaseLimits,
    WorkerOutcome,
    failed_run_error,
    phase_limits,
    reference_call_limit,
    worker_memory_limit,
)
from reprobundle.run.replay import replay_together
from reprobundle.run.replay_options import ReplayOptions
from reprobundle.worker.protocol import LIMIT_CALLS, LIMIT_COMPILE, LIMIT_LOAD, phase_limit_kind

QUICK = dict(warmup=1, repeat=2, rounds=1, dump=False, profile=False)
WORKER_MEMORY = 768 << 20  # room for a worker's own jax (~250 MiB of data), not for a 1 GiB output
HUGE_SIDE = 16384  # an f32[b, b] output of 1 GiB


def _loop(x, n):
    """x scaled until i, stepping by 2 from 0, reaches n: 5 steps for n=10, never for an odd n."""
    def cond(state):
        return state[0] != n

    def body(state):
        i, y = state
        return i + 2, y * 1.0001

    return jax.lax.while_loop(cond, body, (jnp.int32(0), x))[1]


def _outer(x):
    return x[:, None] * x[None, :]


def _variant(registry: Registry, name: str, base: str, leaf: int, array: np.ndarray) -> str:
    """A copy of bundle `base` published as `name` whose input `leaf` is `array` (its blob verifies: a bundle as a
    hostile user would make it)."""
    manifest = copy.deepcopy(registry.resolve(base).manifest)
    manifest["name"] = name
    manifest["inputs"]["leaves"][leaf] = {**manifest["inputs"]["leaves"][leaf], "shape": list(array.shape),
                                          "dtype": array.dtype.name, "blob": registry.put_blob(array.tobytes())}
    return str(registry.publish(manifest))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """`loop` (5 steps) and `stuck` (its input swapped for one that never ends); `outer` (f32[b] -> f32[b, b], packed
    at b=8) and `huge` (its input at b=16384: a 1 GiB output); `liar` (`loop` whose x declares more than its blob)."""
    root = tmp_path_factory.mktemp("runaway") / "store"
    x = np.ones(4, np.float32)
    reprobundle.pack(jax.jit(_loop), x, np.int32(10), name="loop", store=str(root), warmup=1, repeat=5,
                     dump=False, profile=False)
    b, = export.symbolic_shape("b")
    exported = export.export(jax.jit(_outer))(jax.ShapeDtypeStruct((b,), jnp.float32))
    reprobundle.pack(exported, np.ones(8, np.float32), name="outer", store=str(root), warmup=1, repeat=2,
                     dump=False, profile=False)
    registry = Registry.open(root)
    _variant(registry, "stuck", "loop", 1, np.int32(11))
    _variant(registry, "huge", "outer", 0, np.ones(HUGE_SIDE, np.float32))
    liar = copy.deepcopy(registry.resolve("loop").manifest)
    liar["name"] = "liar"
    liar["inputs"]["leaves"][0]["shape"] = [1 << 40]  # 4 TiB declared, 16 bytes stored
    registry.publish(liar)
    return registry


def _replay(registry: Registry, names, **settings) -> list[dict]:
    """Each bundle on the installed jax, timed together in one replay: one run each."""
    options = ReplayOptions.of(**{**QUICK, **settings}).checked()
    return [runs[0] for runs in replay_together(registry, [registry.resolve(n) for n in names], ["installed"], options)]


# ---------------------------------------------------------------------------------------------- phase limits


def test_the_phases_fall_under_their_limits():
    assert [phase_limit_kind(p) for p in ("validate", "inputs", "import_jax", "describe")] == [LIMIT_LOAD] * 4
    assert [phase_limit_kind(p) for p in ("route:deserialize", "route:retrace", "hlo_text", "memory_check")] == \
        [LIMIT_COMPILE] * 4
    assert [phase_limit_kind(p) for p in ("execute", "timing", "profile")] == [LIMIT_CALLS] * 3


def test_the_default_call_limit_follows_the_reference():
    """100 x the reference's median call (its own timed calls), plus the grace for every stretch of calls; none
    without a reference; a given limit wins."""
    assert reference_call_limit([]) is None and reference_call_limit([0]) is None
    assert reference_call_limit([40_000, 10_000, 90_000]) == pytest.approx(RUNAWAY_FACTOR * 40e-6)
    derived = phase_limits(300, 600, None, RUNAWAY_GRACE_S, [40_000] * 50)  # the 40-us loop
    assert derived.calls(1) == pytest.approx(RUNAWAY_FACTOR * 40e-6 + RUNAWAY_GRACE_S)
    assert derived.calls(1) < 120, "a runaway of a 40-us bundle stops within a few minutes"
    assert derived.calls(512) == pytest.approx(512 * RUNAWAY_FACTOR * 40e-6 + RUNAWAY_GRACE_S)
    assert "median call of 40 us" in derived.describe(LIMIT_CALLS)
    assert phase_limits(300, 600, None, 60, None) == PhaseLimits(300, 600)  # at other sizes: no reference
    assert PhaseLimits(300, 600).calls(5) is None
    given = phase_limits(1, 2, 3.0, 0.5, [40_000])
    assert (given.load_s, given.compile_s, given.calls(2)) == (1, 2, 6.5)
    assert given.describe(LIMIT_COMPILE) == "the compile limit of 2 s"


def test_a_loop_that_never_ends_stops_at_its_call_limit_and_the_other_contender_measures(store):
    """`stuck` (the loop's input swapped so that its `while` never ends) replayed with `loop`: it ends at the call
    limit the test sets, as a timeout naming the phase and the limit; `loop` measures; both runs are one group."""
    start = time.monotonic()
    loop, stuck = _replay(store, ["loop", "stuck"], call_limit_s=1.0, call_grace_s=1.0)
    assert time.monotonic() - start < 240  # generous: the worker timeout (1800 s) is what it would take without
    assert loop["status"] == "ok", loop["reason"]
    assert loop["timing"]["samples_ns"]
    assert stuck["status"] == "timeout", stuck["reason"]
    assert "the limit of 2 s for 1 call (1 s a call + 1 s)" in stuck["reason"], stuck["reason"]
    assert "during phase 'execute'" in stuck["reason"], stuck["reason"]
    assert loop["group"] == stuck["group"]


def test_the_default_call_limit_of_a_fast_reference_is_short(store):
    """With nothing set, the call limit is 100 x the reference's median call (microseconds here): with a grace of
    a second the stuck loop ends within seconds, its reason naming the reference's median."""
    stuck, = _replay(store, ["stuck"], call_grace_s=1.0)
    assert stuck["status"] == "timeout", stuck["reason"]
    assert "x the reference's median call of" in stuck["reason"] and "phase 'execute'" in stuck["reason"]


def test_a_phase_limit_is_a_typed_error_where_a_run_raises():
    outcome = WorkerOutcome("timeout", "the worker ran past the compile limit of 1 s", None, 1.0,
                            limit={"kind": LIMIT_COMPILE, "phase": "route:deserialize", "limit_s": 1.0})
    assert isinstance(failed_run_error(outcome, "the reference run failed"), PhaseLimitError)
    outcome.limit = {"kind": "memory", "needed_bytes": 2, "available_bytes": 1, "bound": "MemAvailable"}
    assert isinstance(failed_run_error(outcome, "the reference run failed"), MemoryLimitError)


# ---------------------------------------------------------------------------------------------------- memory


def test_the_default_memory_limit_is_a_share_of_what_is_available_on_the_cpu():
    assert worker_memory_limit(123 << 20) == 123 << 20 and worker_memory_limit(0) is None
    one, three = worker_memory_limit(None, 1), worker_memory_limit(None, 3)
    assert one is not None and three is not None and MEMORY_FLOOR_BYTES <= three <= one
    assert worker_memory_limit(None, 1, "cuda") is None  # an accelerator's driver: not measured, not limited


def test_a_module_that_cannot_fit_is_refused_before_running_with_its_sizes(store):
    """`huge` writes a 1 GiB output; under a 768 MiB worker limit XLA's memory analysis refuses it before the
    first call, with the sizes; `loop`, replayed with it, measures."""
    loop, huge = _replay(store, ["loop", "huge"], memory_limit_bytes=WORKER_MEMORY)
    assert loop["status"] == "ok", loop["reason"]
    assert huge["status"] == "error", huge["reason"]
    assert "needs 1024.0 MiB (outputs 1024.0 MiB" in huge["reason"], huge["reason"]
    assert "refused before running" in huge["reason"] and "RLIMIT_DATA of 768.0 MiB" in huge["reason"], huge["reason"]


def test_a_module_run_past_its_memory_limit_ends_alone(store):
    """The same module with the memory check off runs, and its worker's memory limit (RLIMIT_DATA) ends it as its
    own clear error; `loop` measures."""
    loop, huge = _replay(store, ["loop", "huge"], memory_limit_bytes=WORKER_MEMORY, memory_check=False)
    assert loop["status"] == "ok", loop["reason"]
    assert huge["status"] in ("error", "crashed"), huge["reason"]
    assert "ran out of its memory limit of 768 MiB" in huge["reason"], huge["reason"]


def test_synthetic_inputs_larger_than_memory_are_refused_before_allocation(store):
    """`--shape b=2**31`: 8 GiB of synthetic input, refused by its declared size before numpy allocates it."""
    huge, = _replay(store, ["outer"], memory_limit_bytes=WORKER_MEMORY, shapes={"b": 1 << 31})
    assert huge["status"] == "error", huge["reason"]
    assert "the inputs' declared shapes need 8192.0 MiB" in huge["reason"], huge["reason"]


def test_input_shapes_that_lie_about_their_blob_are_a_typed_error_before_any_worker(store):
    with pytest.raises(CorruptBundleError, match=r"declares float32\[1099511627776\].*holds 16 bytes"):
        _replay(store, ["liar"])


@pytest.mark.crossversion
def test_memory_analysis_on_the_oldest_release(store):
    """jax 0.4.30 (a cached environment) has Compiled.memory_analysis() too: `huge` is refused there before running,
    with its sizes, as on the installed release."""
    huge, = [runs[0] for runs in replay_together(store, [store.resolve("huge")], ["0.4.30"], ReplayOptions.of(
        **QUICK, memory_limit_bytes=WORKER_MEMORY).checked())]
    assert huge["status"] == "error", huge["reason"]
    assert "needs 1024.0 MiB (outputs 1024.0 MiB" in huge["reason"], huge["reason"]
    assert not any("memory check skipped" in note for note in huge["notes"]), huge["notes"]


def test_a_release_without_memory_analysis_skips_the_check_and_says_so():
    """Where Compiled.memory_analysis() is missing or gives nothing, the check is skipped with a note, never an
    error; the installed release's gives the sizes of a real compiled module."""
    from reprobundle.worker.memory import check_module_fits, memory_needs

    class OldCompiled:  # a release or backend without the method
        pass

    class NoStats:
        def memory_analysis(self):
            return None

    assert memory_needs(OldCompiled())[0] is None and "no Compiled.memory_analysis()" in memory_needs(OldCompiled())[1]
    assert check_module_fits(NoStats(), "cpu").startswith("memory check skipped: memory_analysis() returned nothing")
    compiled = jax.jit(_outer).lower(np.ones(256, np.float32)).compile()
    needs, _ = memory_needs(compiled)
    assert needs is not None and needs["output_bytes"] == 256 * 256 * 4 and needs["argument_bytes"] == 256 * 4
    assert check_module_fits(compiled, "cpu") is None  # 256 KiB fits


def test_how_a_worker_ended_is_read_back_with_its_release_phase_and_seconds():
    """#64 item 5: a step that failed because a worker hung or crashed is said in one line from how run/ said the
    worker's end (run/worker_launch.death_text, WorkerProcess's timeout): the release (named, or the side of the
    pair), the phase, the seconds, how many times."""
    from reprobundle.investigate.chain import death_line, deaths_of
    from reprobundle.run.worker_launch import Ended, death_text

    hung = ("the worker ran past the limit of 63.2 s for 7 calls (100 x the reference's median call of 32.1 us, + 60 "
            "s) during phase 'execute' and was killed")
    explain = f"gp-linalg@1: the candidate did not run (timeout: {hung})"
    (death,) = deaths_of(explain, ["0.9.2", "0.10.0"])
    assert death_line(death) == "jax 0.10.0 hung in 'execute' for 63 s"
    twice = f"the baseline did not run (timeout: {hung}); the candidate did not run (timeout: {hung}); " \
            f"jax 0.10.0: {hung}"
    assert [death_line(d) for d in deaths_of(twice, ["0.9.2", "0.10.0"])] == [
        "jax 0.9.2 hung in 'execute' for 63 s", "jax 0.10.0 hung in 'execute' for 63 s, twice"]
    crashed = death_text(Ended(-6, 300 << 20), "load", "LLVM ERROR: Trying to register different dialects\n",
                         memory_limit_bytes=None)
    (death,) = deaths_of(f"jax 0.4.35: {crashed}", ["0.4.34"])
    assert death_line(death) == "jax 0.4.35 crashed (SIGABRT) in 'load'"
    assert deaths_of("the module worker of 0.4.35 did not start: no environment", ["0.4.35"]) == []
