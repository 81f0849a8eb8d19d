"""What this process runs on: Python, OS, CPU, JAX and its backend, packages, settings."""
from __future__ import annotations

import os
import sys

from .protocol import exc_msg, plain

_ENV_PREFIXES = ("JAX_", "XLA_", "TF_CPP_")


_ENV_NAMES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "CUDA_VISIBLE_DEVICES")


def _cpu_family():
    """`AuthenticAMD family 175 model 2`, from /proc/cpuinfo, where its model name says nothing."""
    fields = {}  # type: dict
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                fields.setdefault(k.strip().lower(), v.strip())
                if not line.strip():
                    break
    except OSError:
        return ""
    parts = [fields.get("vendor_id", "")] + ["%s %s" % (k, fields[k]) for k in ("cpu family", "model") if fields.get(k)]
    return " ".join(p for p in parts if p).replace("cpu family", "family")


def _cpu_info():
    import platform

    model = ""
    flags: list = []
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
    if model.lower() == "unknown":  # a sandbox's /proc/cpuinfo (gVisor): the vendor and family still say something
        model = _cpu_family()
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


def base_environment(packages=True):
    """Python, OS, CPU and settings; `packages`: every installed distribution too (~0.5 s: left out of the later
    rounds of a replay, whose environments the host does not keep)."""
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
        "packages": _packages() if packages else {},
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


# ------------------------------------------------------------------------------------------- devices (accelerators)

_PLATFORM_ENV_PREFIXES = ("NCCL_", "TPU_", "CUDA_", "HIP_", "ROCR_", "XLA_PYTHON_CLIENT_", "TF_GPU_", "NVIDIA_TF32")
_OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM when allocating")


def lowering_platform(device=None):
    """The jax.export platform of a device (default: the default backend's first): "cpu", "cuda", "rocm", "tpu".
    jax names GPU devices "gpu" whatever their vendor; their client's platform_version says which."""
    import jax

    d = device if device is not None else jax.devices()[0]
    p = str(d.platform).lower()
    if p != "gpu":
        return p
    try:
        version = str(d.client.platform_version).lower()
    except Exception:
        version = ""
    if "rocm" in version or "hip" in version:
        return "rocm"
    if "cuda" in version:
        return "cuda"
    try:
        from jax._src import xla_bridge

        return str(xla_bridge.canonicalize_platform("gpu"))
    except Exception:
        return "cuda"


def out_of_memory(e):
    """Whether an exception says a device ran out of memory (XLA's RESOURCE_EXHAUSTED)."""
    text = "%s: %s" % (type(e).__name__, e)
    return any(m in text for m in _OOM_MARKERS)


def _dotted(n, parts):
    """A version number as NVIDIA libraries report it: 13000 -> "13.0" (parts=(1000, 10)), 91900 -> "9.19.0"."""
    n = int(n)
    out = []
    for div in parts:
        out.append(str(n // div))
        n %= div
    out.append(str(n))
    return ".".join(out)


def _nvidia_driver():
    try:
        import re

        with open("/proc/driver/nvidia/version") as fh:
            m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", fh.read())
        return m.group(1) if m else None
    except Exception:
        return None


def _cuda_details(device):
    out = {"driver": _nvidia_driver()}
    try:
        from jax._src.lib import cuda_versions as cv
    except Exception:
        cv = None
    calls = (("cuda_runtime", "cuda_runtime_get_version", (1000, 10)),
             ("cuda_driver_api", "cuda_driver_get_version", (1000, 10)),
             ("cudnn", "cudnn_get_version", (10000, 100)),
             ("cublas", "cublas_get_version", (10000, 100)),
             ("cufft", "cufft_get_version", (1000, 100)),
             ("cusolver", "cusolver_get_version", (1000, 100)),
             ("cusparse", "cusparse_get_version", (1000, 100)))
    for key, fn, parts in calls:
        try:
            out[key] = _dotted(getattr(cv, fn)(), parts)
        except Exception:
            pass
    cc = getattr(device, "compute_capability", None)
    if cc is None and cv is not None:
        try:
            n = int(cv.cuda_compute_capability(int(getattr(device, "local_hardware_id", 0) or 0)))
            cc = "%d.%d" % (n // 10, n % 10)
        except Exception:
            cc = None
    if cc is not None:
        out["compute_capability"] = str(cc)
    return dict((k, v) for k, v in out.items() if v is not None)


def device_environment(env):
    """What the run ran on, added to `env` after jax_environment: "platform" becomes the lowering platform ("cuda",
    not the backend's "gpu", which stays as "backend"); "device_kind" ("NVIDIA H200", "TPU v6 lite", the CPU model
    on a CPU), "device_count"; for accelerators "accelerator" (driver, CUDA runtime and driver API, cuDNN, cuBLAS,
    compute capability; libtpu; ROCm's platform version; the device's memory limit) and "platform_flags" (the XLA
    flags, LIBTPU_INIT_ARGS and the NCCL_/TPU_/CUDA_/... variables the run had), so a report can say on what
    hardware a time was taken and whether two runs are comparable."""
    import jax

    try:
        devices = jax.devices()
    except Exception:
        return env
    if not devices:
        return env
    d = devices[0]
    platform = lowering_platform(d)
    env["backend"] = env.get("platform")
    env["platform"] = platform
    env["device_count"] = len(devices)
    kind = str(getattr(d, "device_kind", "") or "")
    env["device_kind"] = env.get("cpu_model") or kind if platform == "cpu" else kind
    if platform == "cpu":
        return env
    env["accelerator"] = _accelerator(d, platform, env)
    env["platform_flags"] = _platform_flags(env.get("env_vars") or {})
    return env


def _accelerator(d, platform, env):
    """The accelerator's driver, runtimes, packages and memory limit (what is known of them)."""
    acc = {}
    if platform == "cuda":
        acc.update(_cuda_details(d))
    elif platform == "tpu":
        acc["accelerator_type"] = os.environ.get("TPU_ACCELERATOR_TYPE")
    acc["platform_version"] = env.get("platform_version")
    packages = env.get("packages") or {}
    acc["packages"] = dict((k, v) for k, v in packages.items()
                           if k.lower().startswith(("jax-cuda", "jax_cuda", "jax-rocm", "jax_rocm", "libtpu",
                                                    "nvidia-cudnn", "nvidia-cublas", "nvidia-cuda-runtime")))
    try:
        stats = d.memory_stats() or {}
        if stats.get("bytes_limit"):
            acc["memory_limit_bytes"] = int(stats["bytes_limit"])
    except Exception:
        pass
    return dict((k, v) for k, v in acc.items() if v not in (None, {}, ""))


def _platform_flags(user_vars):
    """The XLA flags, LIBTPU_INIT_ARGS (split) and the platform's variables the run had."""
    flags: dict = {}
    for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        if user_vars.get(name):
            flags[name] = str(user_vars[name]).split()
    for k, v in os.environ.items():
        if k.startswith(_PLATFORM_ENV_PREFIXES):
            flags[k] = v
    return flags


def device_memory():
    """The first device's memory use so far ({"peak_bytes", "limit_bytes"}), None where jax does not say (CPU)."""
    try:
        import jax

        stats = jax.devices()[0].memory_stats() or {}
    except Exception:
        return None
    if "peak_bytes_in_use" not in stats:
        return None
    return {"peak_bytes": int(stats["peak_bytes_in_use"]), "limit_bytes": int(stats.get("bytes_limit") or 0)}
