"""Long-lived module workers (run/module_server.py, worker/serve.py): one process serves module after module; a
module that fails is an answer, a worker that dies or hangs is reported and replaced."""

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from reprobundle.errors import ReplayError
from reprobundle.run.contenders import ContenderSpec, Settings
from reprobundle.run.module_server import ModuleWorker


def affine_module(i: int) -> str:
    """@main(x, y) = (x * i + y, int32 of the sum of it): one module per i."""
    return f"""module @affine_{i} {{
  func.func public @main(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<i32>) {{
    %c = stablehlo.constant dense<{i}.0> : tensor<8xf32>
    %0 = stablehlo.multiply %x, %c : tensor<8xf32>
    %1 = stablehlo.add %0, %y : tensor<8xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
    %3 = stablehlo.convert %2 : (tensor<f32>) -> tensor<i32>
    return %1, %3 : tensor<8xf32>, tensor<i32>
  }}
}}"""


# a `while` whose condition stays true: the call never returns
HANG = """module @hang {
  func.func public @main(%arg0: tensor<i32>) -> (tensor<i32>) {
    %0 = stablehlo.while(%it = %arg0) : tensor<i32>
     cond {
      %c = stablehlo.constant dense<true> : tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %1 = stablehlo.constant dense<1> : tensor<i32>
      %2 = stablehlo.add %it, %1 : tensor<i32>
      stablehlo.return %2 : tensor<i32>
    }
    return %0 : tensor<i32>
  }
}"""

# parses, but no jaxlib has this kernel: XLA refuses to compile it
UNKNOWN_KERNEL = """module @unknown_kernel {
  func.func public @main(%arg0: tensor<8xf32>) -> (tensor<8xf32>) {
    %0 = stablehlo.custom_call @reprobundle_no_such_kernel(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}"""

X = np.arange(-4, 4, dtype=np.float32) * np.float32(0.5)  # exact sums: the int32 output is exact too
Y = np.arange(8, dtype=np.float32)


def expected(i: int) -> list[np.ndarray]:
    first = X * np.float32(i) + Y
    return [first, np.asarray(first.sum(dtype=np.float32)).astype(np.int32)]


def assert_affine(outcome, i: int) -> None:
    assert outcome.ok, outcome
    assert [(o.dtype, o.shape) for o in outcome.outputs] == [(np.dtype("float32"), (8,)), (np.dtype("int32"), ())]
    np.testing.assert_array_equal(outcome.outputs[0], expected(i)[0])
    assert outcome.outputs[1] == expected(i)[1]


@pytest.fixture(scope="module")
def worker():
    """One worker of this interpreter for the module's tests (a test that kills it leaves a fresh one behind)."""
    with ModuleWorker("installed", timeout_s=120) as w:
        yield w


def test_one_process_serves_many_modules(worker):
    pid = worker.pid
    for i in range(50):
        outcome = worker.run(affine_module(i), [X, Y])
        assert_affine(outcome, i)
        assert outcome.pid == pid
    assert worker.pid == pid and worker.info["pid"] == pid
    swapped = worker.run(affine_module(8), [X.astype(">f4"), Y[::-1].copy()[::-1]])  # big-endian, a strided view
    np.testing.assert_array_equal(swapped.outputs[0], expected(8)[0])
    timed = worker.time(affine_module(3), [X, Y], warmup=1, repeat=4)
    assert timed.ok and len(timed.samples_ns) == 4 and all(s > 0 for s in timed.samples_ns), timed
    assert worker.pid == pid


def test_a_failing_module_is_a_typed_answer_and_the_next_one_runs(worker):
    pid = worker.pid
    compile_error = worker.run(UNKNOWN_KERNEL, [X])
    assert compile_error.status == "error" and compile_error.phase == "compile", compile_error
    assert compile_error.error_type.endswith("RuntimeError"), compile_error  # XlaRuntimeError, JaxRuntimeError
    assert "reprobundle_no_such_kernel" in compile_error.message and "\n" not in compile_error.message
    not_parsed = worker.run("module { this is not StableHLO", [X])
    assert (not_parsed.status, not_parsed.phase, not_parsed.error_type) == ("error", "load", "SignatureError")
    wrong_inputs = worker.run(affine_module(2), [X])
    assert (wrong_inputs.phase, wrong_inputs.error_type) == ("load", "JobError"), wrong_inputs
    assert "takes 2 input leaves" in wrong_inputs.message
    assert compile_error.failure == worker.run(UNKNOWN_KERNEL, [X]).failure  # the same failure compares equal
    assert_affine(worker.run(affine_module(7), [X, Y]), 7)
    assert worker.pid == pid and not worker.lost


def test_a_prepared_module_is_timed_again_without_loading_it(worker):
    prepared = worker.prepare(affine_module(9), [X, Y], outputs=True)
    assert_affine(prepared, 9)
    pid = worker.pid
    for _ in range(3):  # as a paired timing alternates batches
        batch = worker.time_prepared(4)
        assert batch.ok and len(batch.samples_ns) == 4 and batch.pid == pid, batch
        assert batch.compile_s is None  # the answer of a module kept, not loaded again
    assert_affine(worker.run(affine_module(1), [X, Y]), 1)
    with pytest.raises(ValueError, match="call prepare first"):
        worker.time_prepared(1)  # a module run since replaced it


def test_a_hung_call_times_out_and_the_worker_is_replaced(worker):
    pid, starts = worker.pid, worker.starts
    outcome = worker.run(HANG, [np.int32(0)], timeout_s=4)
    assert outcome.timed_out and outcome.phase == "execute" and outcome.error_type == "Timeout", outcome
    assert outcome.pid == pid and worker.pid is None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole process group is gone
    assert_affine(worker.run(affine_module(4), [X, Y]), 4)
    assert worker.starts == starts + 1 and worker.pid != pid


def test_a_call_past_its_phase_limit_ends_there_naming_the_limit(worker):
    """The replay's phase limits bound a candidate's call (minimize derives them from the bundle's reference): a call
    that never returns ends at its calls' limit, long before the call's own timeout, naming the limit and the phase;
    the worker's other phases keep their own limits."""
    from reprobundle.run.execution import PhaseLimits

    limits = PhaseLimits(call_s=0.5, grace_s=1.0, basis="0.5 s a call + 1 s")
    with ModuleWorker("installed", timeout_s=600, limits=limits) as limited:
        assert_affine(limited.run(affine_module(3), [X, Y]), 3)  # loading and compiling stay within theirs
        started = time.monotonic()
        outcome = limited.run(HANG, [np.int32(0)])
        took = time.monotonic() - started
    assert outcome.timed_out and outcome.phase == "execute", outcome
    assert "ran past the limit of 1.5 s for 1 call (0.5 s a call + 1 s) during phase 'execute'" in outcome.message
    assert took < 120  # generous: the call's own timeout is 600 s


def test_a_killed_worker_is_reported_and_restarted(worker):
    pid = worker.pid
    killer = threading.Thread(target=_kill_when_executing, args=(worker, pid, worker.calls))
    killer.start()
    outcome = worker.run(HANG, [np.int32(0)])
    killer.join()
    assert outcome.crashed and outcome.error_type == "SIGKILL" and outcome.phase == "execute", outcome
    assert outcome.pid == pid
    assert_affine(worker.prepare(affine_module(5), [X, Y], outputs=True), 5)
    # a worker that dies between calls is replaced before the next call, which it is not blamed for; a new worker
    # prepares the module it had prepared before timing it
    second = worker.pid
    os.kill(second, signal.SIGKILL)
    again = worker.time_prepared(2)
    assert again.ok and len(again.samples_ns) == 2 and again.pid not in (pid, second), again
    assert any("SIGKILL" in line for line in worker.lost), worker.lost


def _kill_when_executing(worker, pid, calls_before, signum=signal.SIGKILL):
    """Send `signum` to the worker once it runs the next call's module (it never returns from it)."""
    deadline = time.monotonic() + 60
    while not (worker.calls > calls_before and worker.phase == "execute") and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(pid, signum)


def test_an_aborted_worker_says_how_it_died_from_the_evidence_alone():
    """A worker that aborts (as XLA does on a failed check) is reported with the signal's name, the phase it was in,
    its own peak resident memory and the limit it ran under, and the last lines of its stderr (faulthandler's
    first line and the innermost Python frame); never out of memory without the evidence for it."""
    with ModuleWorker("installed", timeout_s=120, memory_limit_bytes=8 << 30) as worker:
        pid = worker.pid
        killer = threading.Thread(target=_kill_when_executing, args=(worker, pid, worker.calls, signal.SIGABRT))
        killer.start()
        outcome = worker.run(HANG, [np.int32(0)])
        killer.join()
        assert outcome.crashed and outcome.error_type == "SIGABRT" and outcome.phase == "execute", outcome
        assert worker.starts == 1 and not outcome.first_death  # a death while running is the module's: not retried
        assert 50 << 20 < outcome.peak_rss_bytes < 8 << 30  # jax imported and a module compiled: tens of MiB at least
        message = outcome.message
        assert message.startswith("the worker died of SIGABRT in phase 'execute' (peak RSS "), message
        assert "under a memory limit of 8192 MiB (RLIMIT_DATA)" in message
        assert "its stderr ended: Fatal Python error: Aborted | innermost Python frame: File " in message, message
        assert "memory?" not in message and "ran out of memory" not in message
        assert "Fatal Python error: Aborted" in outcome.stderr_tail
        assert_affine(worker.run(affine_module(6), [X, Y]), 6)  # replaced at the next call


def test_a_worker_that_dies_loading_a_module_is_given_it_once_more_in_a_fresh_one(tmp_path):
    """A release whose worker aborts loading a module (LLVM's line on stderr, then SIGABRT): where only the first
    process dies, the module's outputs come from a fresh worker and the outcome says how the first one died; where
    every process dies, the call is made twice, no more, and the outcome says in words how, in which phase, and the
    worker's own last line (not faulthandler's dump)."""
    from dying_release import LLVM_LINE, dies_once, dying_release

    once = dying_release(tmp_path / "once", dies_once(tmp_path / "died"))
    with ModuleWorker("installed", python=once, timeout_s=120) as worker:
        first = worker.pid
        assert_affine(outcome := worker.run(affine_module(2), [X, Y]), 2)
        assert worker.starts == 2 and outcome.pid != first
        assert outcome.first_death.startswith("the worker died of SIGABRT in phase 'load'") and \
            LLVM_LINE in outcome.first_death, outcome.first_death
        assert worker.lost == [f"the worker {first} died loading a module ({outcome.first_death}); it was loaded "
                               "again in a fresh worker"]
    always = dying_release(tmp_path / "always", "'@affine_3' in text")
    with ModuleWorker("installed", python=always, timeout_s=120) as worker:
        died = worker.run(affine_module(3), [X, Y])
        assert died.crashed and died.phase == "load" and died.error_type == "SIGABRT" and worker.starts == 2, died
        assert died.first_death and died.death_words == "aborted" and died.last_line == LLVM_LINE, died.stderr_tail
        assert "Fatal Python error: Aborted" in died.stderr_tail  # the dump is there, and not the line said


def test_a_death_is_said_as_memory_only_where_the_evidence_shows_it():
    from reprobundle.run.worker_launch import Ended, death_text, last_words, oom_kills

    aborted = Ended(-signal.SIGABRT, 300 << 20)
    check = "F1206 external/xla/xla/service/cpu/ir_emitter.cc:123] Check failed: shape.IsArray()"
    text = death_text(aborted, "compile", f"{check}\n*** Check failure stack trace: ***\nFatal Python error: "
                      "Aborted\n\nCurrent thread 0x1 (most recent call first):\n  File \"serve.py\", line 9 in "
                      "compile_module\n  File \"serve.py\", line 3 in serve\n", memory_limit_bytes=None)
    assert text == ("the worker died of SIGABRT in phase 'compile' (peak RSS 300 MiB, no memory limit); its stderr "
                    f"ended: {check} | *** Check failure stack trace: *** | Fatal Python error: Aborted | innermost "
                    'Python frame: File "serve.py", line 9 in compile_module')
    assert "out of memory (its stderr says 'bad_alloc')" in death_text(
        aborted, "compile", "terminate called after throwing an instance of 'std::bad_alloc'", memory_limit_bytes=1)
    killed = Ended(-signal.SIGKILL, None)
    now = oom_kills()
    assert "out-of-memory" not in death_text(killed, "execute", "", memory_limit_bytes=None, oom_kills_before=now)
    if now is not None:  # a SIGKILL while the kernel's OOM killer's count grew is its doing
        assert "the kernel's out-of-memory killer killed a process meanwhile" in death_text(
            killed, "execute", "", memory_limit_bytes=None, oom_kills_before=now - 1)
    assert death_text(killed, None, "", memory_limit_bytes=None).endswith("it wrote nothing to stderr")
    assert last_words("a\nb\nc\nd\n") == ["b", "c", "d"]


def test_the_variants_xla_flags_reach_the_worker(tmp_path):
    dump = tmp_path / "dump"
    variant = ContenderSpec("installed", settings=Settings(xla_flags=(f"--xla_dump_to={dump}",)))
    with ModuleWorker(variant, timeout_s=120) as worker:
        assert f"--xla_dump_to={dump}" in worker.info["xla_flags"]
        assert_affine(worker.run(affine_module(2), [X, Y]), 2)
        dumped = sorted(p.name for p in dump.iterdir())  # XLA read --xla_dump_to: it dumped the module it compiled
        assert any(name.endswith("after_optimizations.txt") for name in dumped), dumped
        pid = worker.pid
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    unknown = ContenderSpec("installed", settings=Settings(xla_flags=("--xla_reprobundle_no_such_flag=1",)))
    with pytest.raises(ReplayError, match="does not define the flag --xla_reprobundle_no_such_flag"):
        ModuleWorker(unknown, python=sys.executable, timeout_s=120).start()
    with pytest.raises(ReplayError, match="cannot start the module worker of installed in /nonexistent/python"):
        ModuleWorker(python="/nonexistent/python").start()
    refused = ContenderSpec("installed", settings=Settings(env=(("JAX_PLATFORMS", "cpu"),)))
    with pytest.raises(ReplayError, match="JobError: setting JAX_PLATFORMS through the contender's environment"):
        ModuleWorker(refused, timeout_s=120).start()


def test_workers_launched_together_start_and_a_refused_one_fails_alone():
    """launch() starts each process without waiting; await_start() waits for each: the good ones serve, the one
    whose flag the release does not define is a typed error of its own, and every process ends on close."""
    good = [ModuleWorker("installed", timeout_s=120) for _ in range(2)]
    bad = ModuleWorker(ContenderSpec("installed", settings=Settings(xla_flags=("--xla_reprobundle_no_such_flag=1",))),
                       python=sys.executable, timeout_s=120)
    try:
        for w in (*good, bad):
            w.launch()
        pids = [w.pid for w in (*good, bad)]
        assert all(pids) and len(set(pids)) == 3  # three processes run before any was awaited
        for i, w in enumerate(good):
            w.await_start()
            assert_affine(w.run(affine_module(i + 1), [X, Y]), i + 1)
        with pytest.raises(ReplayError, match="does not define the flag --xla_reprobundle_no_such_flag"):
            bad.await_start()
        assert bad.pid is None
    finally:
        for w in (*good, bad):
            w.close()
    for pid in pids[:2]:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


@pytest.mark.crossversion
def test_a_worker_on_jax_0_4_30():
    from reprobundle.api import environment_manager

    with ModuleWorker(ContenderSpec("0.4.30"), env_manager=environment_manager(), timeout_s=300) as old:
        assert old.info["jax"] == "0.4.30"
        for i in range(3):
            assert_affine(old.run(affine_module(i), [X, Y]), i)
        failed = old.run(UNKNOWN_KERNEL, [X])
        assert (failed.status, failed.phase) == ("error", "compile"), failed
        assert old.time(affine_module(1), [X, Y], repeat=2).ok
