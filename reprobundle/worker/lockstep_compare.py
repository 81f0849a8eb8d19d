"""`--compare A B` of a reproducer: two JAX releases (or two Pythons, each maybe with environment variables) timed
on one bundle, each side a process of its own, in lockstep; a slowdown judged from the paired steps.

One definition, used twice: `python NAME.zip --compare A B` imports this module (worker/standalone.py), and the
standalone script `reprobundle script` writes holds its code verbatim, this docstring aside
(bundle/script_runner.py reads this file and appends it to the script's program). So it needs only the standard
library and numpy, has no relative import and no `from __future__` line, and its names never clash with the
script's own.

A side is `0.4.31` (run by `uv run --no-project --with jax==V --with jaxlib==V`), or the path of a Python that has
JAX, either followed by `:VAR=VALUE;VAR=VALUE` (XLA_FLAGS among them). Each round starts both sides afresh; a side
runs the reproducer with its serving argument and answers on stdout:

    REPRO ready {"jax": "0.4.31", "exit": 0, "one_ns": 12345.0}    its release, its outputs' exit code, one call
    step N          (on its stdin)  ->  REPRO ns 12345.6            one call's time, averaged over N back to back
    end             (on its stdin)                                   it exits

Both sides are timed in lockstep (A's step, then B's, the order alternating), PAIRED_STEPS pairs a round; the
verdict: B's median paired ratio, with a 95% interval bootstrapped over rounds then pairs. Exit 1 when that ratio
is MIN_EFFECT or more and the interval lies above 1 (a slowdown), 0 when not, 3 when a side could not run (no uv,
an install that fails, a release that needs another Python, a side that stopped answering), 2 a bad command line.
"""
import json
import os
import shlex
import shutil
import subprocess
import tempfile

import numpy as np

COMPARE_ROUNDS = 5  # fresh pairs of processes: a pair that one busy moment slowed is one round of five, not half
PAIRED_STEPS = 20
MIN_EFFECT = 1.10  # two processes of one release can differ by a few percent: less than this is not judged
BOOTSTRAP = 2000


def calls_a_step(one_ns):
    """Calls in a step: a fast module's step is a batch lasting ~10 ms (as reprobundle's worker batches them), so
    the dispatch of one call is not what is timed."""
    return max(1, min(10000, int(1e7 / max(one_ns, 1.0))))


def compare_side(spec):
    """(what, environment variables) of a --compare side: `0.4.31`, `/path/python`, either with `:VAR=V;VAR=V`;
    ValueError for a malformed one."""
    what, _, rest = spec.partition(":")
    env = {}
    for item in filter(None, rest.split(";")):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ValueError("%r: a side's settings are VAR=VALUE separated by ';'" % spec)
        env[name.strip()] = value
    if not what:
        raise ValueError("an empty side in --compare")
    return what, env


def side_command(what, me, serving, packages=()):
    """The command that runs the reproducer `me` (a script or a zip) on one side with its `serving` arguments: a
    Python's path as it is, a release through uv (with `packages`); None when the release needs uv and there is
    none."""
    if os.path.sep in what or os.path.isfile(what):
        return [what, me] + list(serving)
    uv = shutil.which("uv")
    if uv is None:
        return None
    extra = [word for package in packages for word in ("--with", package)]
    return [uv, "run", "--no-project", "--with", "jax==" + what, "--with", "jaxlib==" + what] + extra + \
        ["python", me] + list(serving)


def manual_line(what, env, name):
    """The line that runs the reproducer `name` on release `what` in a fresh environment made by pip."""
    prefix = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in sorted(env.items()))
    body = ("python -m venv jax-%s && jax-%s/bin/pip install jax==%s numpy && jax-%s/bin/python %s"
            % (what, what, what, what, shlex.quote(name)))
    return (prefix + " " if prefix else "") + body


class ComparedSide:
    """One side of --compare: the reproducer serving its times in a process of its own."""

    def __init__(self, name, command, env):
        self.name = name
        self.errors = tempfile.TemporaryFile(mode="w+")  # a file: a pipe nobody reads could fill and block it
        self.proc = subprocess.Popen(command, env=dict(os.environ, **env), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errors, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self.to_side, self.from_side = self.proc.stdin, self.proc.stdout
        self.said = []
        self.closed = None
        self.ready = self._read("REPRO ready ")

    def _read(self, prefix):
        for line in self.from_side:
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
            self.said.append(line.rstrip())
        return None

    def step(self, n):
        self.to_side.write("step %d\n" % n)
        self.to_side.flush()
        found = self._read("REPRO ns ")
        if found is None:
            raise RuntimeError("%s stopped answering" % self.name)
        return float(found)

    def close(self):
        """End the side (once: a second call returns what the first read); the end of its stderr."""
        if self.closed is not None:
            return self.closed
        try:
            self.to_side.write("end\n")
            self.to_side.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
        self.errors.seek(0)
        self.closed = self.errors.read()[-2000:]
        return self.closed

    def why(self):
        """One line: why this side could not start (uv's `cause:` where uv could not install the release)."""
        said = [line.strip() for line in (self.said + self.close().splitlines()) if line.strip()]
        cause = [line for line in said if line.startswith("cause:")]
        errors = [line for line in said if line.startswith(("error:", "result: could not run"))]
        line = (cause or errors or said[-1:] or ["it exited (%s) before it was ready" % self.proc.returncode])[0]
        return line.split(":", 1)[1].strip() if line.startswith(("cause:", "error:")) else line


def compare_sides(argv, me, serving, reference_label, stored_lines=(), packages=()):
    """--compare A B [--rounds N] of the reproducer `me` (served by `serving` arguments): both sides started, each in
    its own process, then timed in lockstep, in `--rounds` pairs of processes; the exit code (module docstring).
    `reference_label` names what a side's outputs are checked against; `stored_lines`: the stored replay's times,
    printed beside the verdict; `packages`: what a side made by uv needs beyond jax and numpy."""
    name = os.path.basename(me)
    rounds = COMPARE_ROUNDS
    if len(argv) == 4 and argv[2] == "--rounds" and argv[3].isdigit() and int(argv[3]) > 0:
        rounds, argv = int(argv[3]), argv[:2]
    if len(argv) != 2:
        print("usage: python %s --compare A B [--rounds N]" % name)
        return 2
    try:
        sides = [compare_side(a) for a in argv]
    except ValueError as e:
        print("error: %s" % e)
        return 2
    commands = [side_command(what, me, serving, packages) for what, _ in sides]
    if None in commands:
        print("result: could not run: uv is not on PATH: run these two, each in a fresh environment, and compare "
              "their medians:")
        for what, env in sides:
            print("  " + manual_line(what, env, name))
        return 3
    print("comparing %s (A) with %s (B): %d rounds of %d paired steps, each side in its own process"
          % (argv[0], argv[1], rounds, PAIRED_STEPS))
    pairs, releases = [], None
    for _ in range(rounds):
        found = lockstep_round(commands, sides, reference_label)
        if found is None:
            return 3
        releases, steps = found
        pairs.append(steps)
    return judge_pairs(argv, releases, pairs, stored_lines)


def lockstep_round(commands, sides, reference_label):
    """(each side's release, [(A's ns, B's ns)] of PAIRED_STEPS steps), or None (what went wrong printed: a side
    that could not start, install or run is "could not run", never a traceback)."""
    started = []
    try:
        for k in (0, 1):
            side = ComparedSide("AB"[k], commands[k], sides[k][1])
            started.append(side)
            if side.ready is None:
                print("result: could not run: %s (%s) did not start: %s" % (side.name, sides[k][0], side.why()))
                return None
            if side.ready.get("exit") == 1:
                print("  %s: its outputs differ from %s (run it alone to see them)" % (side.name, reference_label))
        n = calls_a_step(max(float(s.ready.get("one_ns") or 1.0) for s in started))
        steps = []
        for i in range(PAIRED_STEPS):
            order = started if i % 2 == 0 else started[::-1]
            got = {side.name: side.step(n) for side in order}
            steps.append((got["A"], got["B"]))
        return [s.ready.get("jax") for s in started], steps
    except Exception as e:  # a side that died, said nonsense or could not start: it did not run
        text = str(e).strip()
        print("result: could not run: could not time: %s" % ((text.splitlines()[0] if text else type(e).__name__)[:500]))
        return None
    finally:
        for side in started:
            side.close()


def judge_pairs(names, releases, rounds, stored_lines=()):
    """The verdict of the paired steps (module docstring), printed; the exit code."""
    a = [np.asarray([x for x, _ in steps]) for steps in rounds]
    b = [np.asarray([y for _, y in steps]) for steps in rounds]
    ratio = float(np.median(np.concatenate(b) / np.concatenate(a)))
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(BOOTSTRAP):  # rounds resampled, then each round's pairs: both kinds of noise in the interval
        pick = rng.integers(0, len(a), len(a))
        chosen = [rng.integers(0, len(a[i]), len(a[i])) for i in pick]
        draws.append(np.median(np.concatenate([b[i][c] / a[i][c] for i, c in zip(pick, chosen)])))
    lo, hi = (float(x) for x in np.percentile(draws, [2.5, 97.5]))
    for name, label, times in ((names[0], "A", a), (names[1], "B", b)):
        print("%s %s (jax %s): median %.1f us a call" % (label, name, releases["AB".index(label)],
                                                         np.median(np.concatenate(times)) / 1e3))
    for stored in stored_lines:
        print(stored)
    said = "B is %.2fx the time of A [%.2f-%.2f, 95%% interval of the paired steps' ratio]" % (ratio, lo, hi)
    if lo > 1.0 and ratio >= MIN_EFFECT:
        print("result: SLOWER: " + said)
        return 1
    if hi < 1.0 and ratio <= 1 / MIN_EFFECT:
        print("result: faster, not a slowdown: " + said)
        return 0
    print("result: no slowdown of %d%% or more: %s" % (round((MIN_EFFECT - 1) * 100), said))
    return 0
