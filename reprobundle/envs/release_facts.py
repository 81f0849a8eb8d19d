"""What a release says of itself (worker/release_facts.py: every XLA flag with its type and default, every JAX option
with its value, the versions and revisions), read once per environment and cached beside it as
`release-facts.json`, keyed by the probe's version and the environment's jax, jaxlib and Python: an environment
made again is probed again. The probe runs with the environment's interpreter, isolated (-I), with no XLA_FLAGS and
no JAX_* variables, so what it reads are the release's defaults. The few flags that are no DebugOptions field
(`xla_fuel`, legacy aliases) come from what `XLA_FLAGS=--help` prints, marked `"source": "help"`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any, Callable

from ..errors import ReplayError
from ..text import clean
from .build import clean_env
from .env_folders import JaxEnvironment
from .installed import keeps_pythonpath

PROBE = Path(__file__).resolve().parent.parent / "worker" / "release_facts.py"
PROBE_VERSION = 3  # 2: the flags --help prints that are no DebugOptions field; 3: libtpu's flag names
FACTS_FILE = "release-facts.json"
TIMEOUT_S = 180


def _key(env: JaxEnvironment) -> dict:
    return {"probe": PROBE_VERSION, "jax": env.jax_version, "jaxlib": env.jaxlib_version,
            "python": env.python_version}


def release_facts(env: JaxEnvironment, progress: Callable[[str], None] | None = None) -> dict:
    """The facts of the release in `env`, from the cache beside it when it holds this environment's, else probed
    (and cached: temp file, then rename). {"revisions", "xla_flags" (None: the descriptor was not found),
    "jax_options", "libtpu" (None, or {"version", "flags": its flags' names, "source"}), "cached": bool}."""
    cache = env.path / FACTS_FILE if env.path is not None else None
    if cache is not None:
        with contextlib.suppress(OSError, ValueError):
            stored = json.loads(cache.read_text())
            if stored.get("key") == _key(env):
                return {**stored["facts"], "cached": True}
    if progress:
        progress(f"changes: reading what jax {env.jax_version} says of its flags and options")
    facts = _probe(env)
    if cache is not None:
        with contextlib.suppress(OSError):
            tmp = cache.with_name(f"{FACTS_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            tmp.write_text(json.dumps({"key": _key(env), "facts": facts}, sort_keys=True))
            os.replace(tmp, cache)
    return {**facts, "cached": False}


def _probe_environment(env: JaxEnvironment) -> tuple[dict[str, str], str]:
    """The probe's environment variables and isolation flag: clean, on the CPU, PYTHONPATH kept for the host's own
    interpreter (installed.keeps_pythonpath)."""
    environ = {k: v for k, v in clean_env().items() if k != "XLA_FLAGS" and not k.startswith("JAX_")}
    environ["JAX_PLATFORMS"] = "cpu"  # flags and options do not depend on the device; the CPU is always there
    if keeps_pythonpath(env.python_executable):
        environ["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return environ, "-s"
    return environ, "-I"


def _probe(env: JaxEnvironment) -> dict:
    environ, isolation = _probe_environment(env)
    try:
        done = subprocess.run([str(env.python_executable), isolation, str(PROBE)], capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=environ)
    except subprocess.TimeoutExpired:
        raise ReplayError(f"jax {env.jax_version}: reading its flags and options took over {TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = clean(" ".join(done.stderr.strip().splitlines()[-3:]), 400)
        raise ReplayError(f"jax {env.jax_version}: reading its flags and options failed (exit {done.returncode}): "
                          f"{tail}", hint="rerun with REPROBUNDLE_DEBUG=1; `reprobundle envs` shows the environment")
    try:
        facts = json.loads(done.stdout)
    except ValueError:
        raise ReplayError(f"jax {env.jax_version}: its flags and options probe printed no JSON") from None
    out = {k: facts.get(k) for k in ("revisions", "xla_flags", "jax_options", "libtpu")}
    if out["xla_flags"] is not None:  # flags that are no DebugOptions field (xla_fuel, legacy aliases)
        for name, entry in _help_flags(env, environ).items():
            out["xla_flags"].setdefault(name, entry)
    return out


SAID_FILE = "setting-said.json"
SETTING_TIMEOUT_S = 120
_LOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.-]+:\d+\] ")  # absl's: W1206 17:29:33.605 31457 f.cc:1079]


def setting_said(env: JaxEnvironment, kind: str, name: str, value: Any) -> dict:
    """What the release in `env` says when a flag ("flag": `--NAME=VALUE` in XLA_FLAGS) or a JAX option ("option":
    `jax.config.update(NAME, VALUE)`) is set as a user pastes it, with one compile after: {"accepted": whether it
    ran, "said": [its own words about the setting: a deprecation warning, XLA's "is no longer supported"], "error":
    the refusal as the release words it ("AttributeError: Unrecognized config option: jax_safer_randint", "Unknown
    flag in XLA_FLAGS: --xla_x=false"), "cached"}. Cached beside the environment, per setting."""
    from ..analysis.release_delta import flag_value

    shown = f"--{name}={flag_value(value)}" if kind == "flag" else f"{name}={json.dumps(value)}"
    key = json.dumps({**_key(env), "setting": [kind, shown]}, sort_keys=True)
    cache = env.path / SAID_FILE if env.path is not None else None
    stored: dict = {}
    if cache is not None:
        with contextlib.suppress(OSError, ValueError):
            stored = json.loads(cache.read_text())
            if isinstance(stored.get(key), dict):
                return {**stored[key], "cached": True}
    said = _said(env, kind, name, value, shown)
    if cache is not None:
        with contextlib.suppress(OSError):
            tmp = cache.with_name(f"{SAID_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            tmp.write_text(json.dumps({**(stored if isinstance(stored, dict) else {}), key: said}, sort_keys=True))
            os.replace(tmp, cache)
    return {**said, "cached": False}


def _said(env: JaxEnvironment, kind: str, name: str, value: Any, shown: str) -> dict:
    environ, isolation = _probe_environment(env)
    if kind == "flag":
        environ["XLA_FLAGS"] = shown
    try:
        done = subprocess.run([str(env.python_executable), isolation, str(PROBE), "--setting", kind, name,
                               json.dumps(value)], capture_output=True, text=True, timeout=SETTING_TIMEOUT_S,
                              env=environ)
    except subprocess.TimeoutExpired:
        raise ReplayError(f"jax {env.jax_version}: setting {shown} took over {SETTING_TIMEOUT_S} s") from None
    return _said_of(done, kind, name)


def _said_of(done: subprocess.CompletedProcess, kind: str, name: str) -> dict:
    """setting_said's answer from the probe's output: its JSON, and the lines of stderr (XLA's log, its prefix left
    out) that name the setting; no JSON: XLA aborted on the flag, or the release could not start."""
    lines = [_LOG_PREFIX.sub("", line).strip() for line in done.stderr.splitlines()]
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"accepted": False, "said": [], "error": clean(_refusal(lines, name, done.returncode), 300)}
    words = name.removeprefix("jax_") if kind == "option" else name  # JAX's warnings name `safer_randint` too
    said = [w for w in found.get("warnings") or [] if words in w] + [line for line in lines if name in line]
    return {"accepted": bool(found.get("accepted")), "said": [clean(w, 300) for w in dict.fromkeys(said)],
            "error": clean(found["error"], 300) if found.get("error") else None}


def _refusal(lines: list[str], name: str, code: int) -> str:
    """XLA's words where it aborts on a flag (`Unknown flag in XLA_FLAGS: --xla_x=false`), else the last lines."""
    return next((line for line in lines if "Unknown flag" in line or name in line), None) or " ".join(lines[-2:]) \
        or f"exit {code}"


_HELP_LINE = re.compile(r"^\s*--(xla_[a-z0-9_]+)=(\S*)\s+(bool|int32|int64|float|string)\b", re.M)


def _help_flags(env: JaxEnvironment, environ: dict[str, str]) -> dict[str, dict]:
    """{flag: {"type", "default", "source": "help"}} of what `XLA_FLAGS=--help` prints (jaxlib aborts after it;
    absl cuts the text at ~15,000 bytes, so this only adds the few flags that are no DebugOptions field)."""
    isolation = "-s" if keeps_pythonpath(env.python_executable) else "-I"
    try:
        done = subprocess.run([str(env.python_executable), isolation, "-c", "import jax; jax.numpy.ones(1)"],
                              capture_output=True, text=True, timeout=TIMEOUT_S,
                              env={**environ, "XLA_FLAGS": "--help"})
    except subprocess.TimeoutExpired:
        return {}
    return {m.group(1): {"type": m.group(3), "default": _help_value(m.group(2), m.group(3)), "source": "help"}
            for m in _HELP_LINE.finditer(done.stdout + done.stderr)}


def _help_value(text: str, kind: str):
    if kind == "bool":
        return text == "true"
    if kind in ("int32", "int64"):
        with contextlib.suppress(ValueError):
            return int(text)
    if kind == "float":
        with contextlib.suppress(ValueError):
            return float(text)
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def release_changes(manager, a: str, b: str, platform: str | None = None,
                    progress: Callable[[str], None] | None = None) -> dict:
    """What changed from release `a` to release `b` (api.changes), read from the releases' environments for
    `platform` in `manager` (made if missing; default: this machine's accelerator, else the CPU)."""
    from ..analysis.release_delta import release_delta
    from .platforms import platform_here

    chosen, build = platform_here(platform)
    facts = [release_facts(manager.ensure(v, platform=chosen, build=build, progress=progress), progress)
             for v in (a, b)]
    return {**release_delta(a, b, *facts), "platform": chosen, "cached": [f["cached"] for f in facts]}
