"""The hardware a time was taken on, from an environment record (a manifest's or a run's), and whether two compare.

The worker records the platform it ran on ("cpu", "cuda", "rocm", "tpu"), the device kind ("NVIDIA H200", "TPU v6
lite"; on a CPU its model) and count, and for accelerators the driver, CUDA, cuDNN and libtpu versions
(worker/environment.py device_environment). Records made before that say only "platform" and "cpu_model". No I/O.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["hardware_of", "hardware_text", "hardware_note"]

_PLATFORM_NAMES = {"cpu": "CPU", "cuda": "NVIDIA GPU", "rocm": "AMD GPU", "tpu": "TPU", "gpu": "GPU"}


def hardware_of(env: dict | None) -> dict:
    """{"platform", "device", "count", "details"} of an environment record (free-form data: anything may be
    missing or of another type)."""
    env = env if isinstance(env, dict) else {}
    platform = str(env.get("platform") or "cpu").lower()
    if platform == "gpu":  # a record from before device_environment: the backend's name
        platform = "cuda"
    kind = env.get("device_kind") or (env.get("cpu_model") if platform == "cpu" else None)
    count = env.get("device_count")
    acc: dict = env["accelerator"] if isinstance(env.get("accelerator"), dict) else {}
    details = {k: str(acc[k]) for k in ("driver", "cuda_runtime", "cudnn", "compute_capability", "accelerator_type")
               if acc.get(k)}
    return {"platform": platform, "device": str(kind) if kind else None,
            "count": count if isinstance(count, int) else None, "details": details}


def hardware_text(env: dict | None) -> str:
    """"NVIDIA H200", "2 x TPU v6 lite", "CPU (AMD EPYC 7B13)", "CPU"."""
    hw = hardware_of(env)
    name = _PLATFORM_NAMES.get(hw["platform"], hw["platform"])
    if hw["platform"] == "cpu":
        return f"CPU ({hw['device']})" if hw["device"] else "CPU"
    device = hw["device"] or name
    return f"{hw['count']} x {device}" if hw["count"] and hw["count"] > 1 else device


def _key(env: dict | None) -> tuple:
    hw = hardware_of(env)
    return (hw["platform"], hw["device"] if hw["platform"] != "cpu" else None)


def hardware_note(packed: dict | None, runs: Iterable[dict | None]) -> str | None:
    """One sentence when the runs ran on other hardware than the reference was packed on (another platform, or
    another accelerator): "packed on NVIDIA H200, replayed on CPU (AMD EPYC 7B13): timings are not comparable to
    the reference" (and, across platforms, that outputs may differ from it by the platforms' arithmetic).
    Different CPU models alone are the comparison's machine notes, not this."""
    envs = [e for e in runs if isinstance(e, dict) and e]
    if not envs or not isinstance(packed, dict) or not packed:
        return None
    differ = [e for e in envs if _key(e) != _key(packed)]
    if not differ:
        return None
    replayed = sorted({hardware_text(e) for e in differ})
    note = (f"packed on {hardware_text(packed)}, replayed on {' and '.join(replayed)}: timings are not comparable "
            "to the reference")
    platforms = {hardware_of(e)["platform"] for e in differ} | {hardware_of(packed)["platform"]}
    if len(platforms) > 1:  # another platform computes differently: the reference check says so, not the release
        note += (", and outputs may differ from it by the platforms' arithmetic"
                 + (" (an NVIDIA GPU's float32 matmuls use TF32 by default)" if "cuda" in platforms else "")
                 + "; compare releases on one platform")
    return note
