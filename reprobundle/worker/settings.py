"""A contender's own settings (the job's "settings"): environment variables and XLA flags set before jax is
imported, JAX config options set before the function loads. Only this worker's process sees them, so they reach
only their contender.

A JAX config option is given as text (from the command line) and parsed to the type of the option's current value
on this release (bool, int, float, else the text), so `jax_enable_x64=true` is a bool where 0.4.30 and 0.8.0 both
want one. An option this release does not know, or a value it refuses, is this job's error (JobError); an XLA flag
it does not know makes XLA abort while jax initialises its backend, which the host reads from the worker's stderr
(run/contenders.unknown_flag_reason)."""
from __future__ import annotations

import os

from .protocol import JobError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def job_settings(job):
    """(xla_flags [str], jax_config {name: text}, env {name: text}) of the job, empty when it has none."""
    settings = job.get("settings") or {}
    flags = [str(f) for f in settings.get("xla_flags") or []]
    config = {str(k): str(v) for k, v in (settings.get("jax_config") or {}).items()}
    env = {str(k): str(v) for k, v in (settings.get("env") or {}).items()}
    return flags, config, env


def apply_environment(job, notes):
    """Before jax is imported: set the settings' environment variables; return its XLA flags as one string, to be
    appended to the user's flags and the worker's own."""
    flags, _, env = job_settings(job)
    for name, value in sorted(env.items()):
        if name in ("XLA_FLAGS", "JAX_PLATFORMS"):
            raise JobError("setting %s through the contender's environment is not allowed: give XLA flags as "
                           "XLA_FLAGS=... (appended to the worker's) and the platform with --platform" % name)
        os.environ[name] = value
    if env:
        notes.append("contender settings: set %s" % ", ".join("%s=%s" % kv for kv in sorted(env.items())))
    return " ".join(flags)


def parse_config_value(current, text):
    """`text` as a value of the type of `current` (the option's value now)."""
    if isinstance(current, bool):
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("%r is not a boolean (true/false, 1/0)" % text)
    if isinstance(current, int):
        return int(text)
    if isinstance(current, float):
        return float(text)
    if text.strip().lower() in ("none", "null") and current is None:
        return None
    return text


def apply_config(job, notes):
    """After jax is imported and before the function loads: jax.config.update for each option of the settings."""
    import jax

    _, config, _ = job_settings(job)
    for name, text in sorted(config.items()):
        try:
            current = getattr(jax.config, name)
        except AttributeError:
            raise JobError("jax %s has no config option %r (from this contender's settings)"
                           % (jax.__version__, name))
        try:
            value = parse_config_value(current, text)
            jax.config.update(name, value)
        except Exception as e:
            raise JobError("jax %s refused %s=%s (from this contender's settings): %s"
                           % (jax.__version__, name, text, e))
        notes.append("contender settings: jax.config.update(%r, %r)" % (name, value))
