"""What this process runs on: Python, OS, CPU, JAX and its backend, packages, settings."""
from __future__ import annotations

import os
import sys

from .protocol import exc_msg, plain

_ENV_PREFIXES = ("JAX_", "XLA_", "TF_CPP_")


_ENV_NAMES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "CUDA_VISIBLE_DEVICES")


def _cpu_info():
    import platform

    model, flags = "", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if not model and k in ("model name", "hardware", "cpu model", "processor") and not v.strip().isdigit():
                    model = v.strip()
                if not flags and k in ("flags", "features"):
                    flags = sorted(v.split())
                if model and flags:
                    break
    except OSError:
        pass
    if not model and sys.platform == "darwin":
        try:
            import subprocess

            model = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                   text=True, timeout=5, check=False).stdout.strip()
        except Exception:
            pass
    return model or platform.processor(), flags


def env_vars():
    out = {}
    for k, v in os.environ.items():
        if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES):
            out[k] = v
    return out


def _packages():
    try:
        from importlib import metadata
    except ImportError:
        return {}
    out = {}
    try:
        for d in metadata.distributions():
            try:
                name = d.metadata["Name"]
            except Exception:
                name = None
            if name:
                out[str(name)] = str(d.version)
    except Exception:
        pass
    return out


def base_environment():
    import platform

    import numpy as np

    model, flags = _cpu_info()
    env = {
        "python": sys.version.split()[0],
        "python_full": sys.version,
        "numpy": np.__version__,
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_flags": flags,
        "cpu_count": os.cpu_count(),
        "env_vars": env_vars(),
        "packages": _packages(),
    }
    try:
        import ml_dtypes

        env["ml_dtypes"] = ml_dtypes.__version__
    except Exception:
        env["ml_dtypes"] = None
    return env


def jax_environment(env):
    import jax

    env["jax"] = jax.__version__
    try:
        import jaxlib.version

        env["jaxlib"] = jaxlib.version.__version__
    except Exception:
        import jaxlib

        env["jaxlib"] = getattr(jaxlib, "__version__", None)
    try:
        env["platform"] = jax.default_backend()
        devs = jax.devices()
        env["devices"] = [{"id": int(d.id), "kind": str(getattr(d, "device_kind", "")),
                           "platform": str(d.platform)} for d in devs]
        try:
            env["platform_version"] = str(devs[0].client.platform_version)
        except Exception:
            env["platform_version"] = None
    except Exception as e:
        env["platform"] = None
        env["devices"] = []
        env["backend_error"] = exc_msg(e)
    cfg = {}
    for name in ("jax_enable_x64", "jax_default_matmul_precision", "jax_platforms",
                 "jax_export_calling_convention_version", "jax_use_shardy_partitioner",
                 "jax_default_prng_impl", "jax_threefry_partitionable", "jax_compilation_cache_dir",
                 "jax_enable_compilation_cache", "jax_export_deserialize_expired_versions",
                 "jax_export_ignore_forward_compatibility", "jax_numpy_rank_promotion"):
        try:
            cfg[name] = plain(getattr(jax.config, name))
        except Exception:
            pass
    env["jax_config"] = cfg
