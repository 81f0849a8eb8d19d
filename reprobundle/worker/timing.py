"""Timed calls, on the worker's own or in lockstep with the host (see the package docstring)."""
from __future__ import annotations

import os
import sys

from .protocol import JobError
from .state import WorkerState


class Control:
    """The lockstep control channel: commands on stdin, replies on a private copy of the original stdout."""

    def __init__(self):
        self._out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # whatever else prints (jax, XLA) goes to stderr, never into the channel
        sys.stdout = sys.stderr

    def send(self, line):
        self._out.write(line + "\n")
        self._out.flush()

    def receive(self):
        line = sys.stdin.readline()
        return line.strip() if line else None


class TimedCalls(WorkerState):
    """Timed calls, on the worker's own or in lockstep with the host (see the package docstring). Mixed into job.Worker."""

    def time_calls(self, compiled, warmup, repeat):
        self.warm_up(compiled, warmup)
        return self.timed_calls(compiled, repeat)

    def warm_up(self, compiled, warmup):
        import time

        import jax

        took = []
        for _ in range(max(0, warmup)):
            t0 = time.perf_counter_ns()
            jax.block_until_ready(compiled(*self.dev_inputs))
            took.append(time.perf_counter_ns() - t0)
        # the warm-up is the calibration of a lockstep step: where a run's time went (the host's spent.py) says so
        self.result["phase_s"]["calibrate"] = round(sum(took) / 1e9, 6)
        took.sort()
        return took[len(took) // 2] if took else 0

    def serve_timed_calls(self, compiled, warmup):
        """Lockstep timing: timed calls only when the host asks (see the module docstring)."""
        self.control.send("ready %d" % self.warm_up(compiled, max(1, warmup)))
        samples: list = []
        while True:
            command = self.control.receive()
            if command is None or command == "finish":
                return samples
            verb, _, count = command.partition(" ")
            if verb != "time" or not count.isdigit():
                raise JobError("unknown lockstep command %r" % command[:100])
            batch = self.timed_calls(compiled, int(count))
            samples.extend(batch)
            self.control.send(" ".join(str(t) for t in batch))

    def timed_calls(self, compiled, repeat):
        import time

        import jax

        args = self.dev_inputs
        samples = []
        pc = time.perf_counter_ns
        bur = jax.block_until_ready
        for _ in range(max(0, repeat)):
            t0 = pc()
            r = compiled(*args)
            bur(r)
            t1 = pc()
            samples.append(t1 - t0)
            del r
        return samples
