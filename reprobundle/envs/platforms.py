"""Platforms: which accelerators this machine has, and which platform a bundle replays on.

A platform is what `jax.export` lowers for: "cpu", "cuda", "rocm" or "tpu". A bundle carries the platforms its
artifact was lowered for (`function.fields.platforms`; `pack --platforms cuda,cpu` makes one artifact for several).
A replay runs every version on one platform, chosen by `choose_platform` from the bundle's platforms and the devices
present here (`detect_devices`), or named with `--platform`. An environment is built per (JAX release, build), the
build being the wheels that platform needs: "cpu", "cuda12", "cuda13", "rocm" or "tpu" (see envs.py).

Detection reads what the drivers expose, without importing JAX or creating a device context: /proc/driver/nvidia
(else `nvidia-smi -L`) and the CUDA driver's version from libcuda for NVIDIA GPUs, /dev/kfd and the KFD topology for
AMD GPUs, Google's PCI vendor id for TPUs. REPROBUNDLE_PLATFORMS ("cpu,cuda") replaces detection where it is wrong
(a container that hides /proc/driver) or to test.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..config import settings
from ..errors import ReplayError, UsageError

__all__ = ["PLATFORMS", "ACCELERATORS", "BUILDS", "CUDA_BUILDS", "Device", "Devices", "PlatformChoice",
           "parse_platform", "build_platform", "canonical_platforms", "detect_devices", "platform_here",
           "choose_platform", "platform_label"]

log = logging.getLogger(__name__)

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # jax.export's lowering platforms
ACCELERATORS = ("cuda", "rocm", "tpu")
CUDA_BUILDS = ("cuda13", "cuda12")  # newest first: the CUDA majors of jax's CUDA wheels (jax[cuda13], jax[cuda12])
BUILDS = ("cpu", *CUDA_BUILDS, "rocm", "tpu")
_LABELS = {"cpu": "CPU", "cuda": "NVIDIA GPU", "rocm": "AMD GPU", "tpu": "TPU"}
_ALIASES = {"gpu": "cuda", "nvidia": "cuda", "amd": "rocm", "host": "cpu"}
GOOGLE_PCI_VENDOR = "0x1ae0"  # TPUs (what libtpu looks for)


# Accelerators one process at a time may hold: a second process that opens the chip fails (libtpu's lockfile).
ONE_PROCESS_PLATFORMS = ("tpu",)


def one_process_at_a_time(platform: str) -> bool:
    """Whether `platform`'s devices admit one process at a time (a TPU): measurements visit their contenders in
    alternation there (run/schedule.py), and what needs two live workers at once cannot run."""
    return platform in ONE_PROCESS_PLATFORMS


def refuse_two_at_once(platform: str, what: str) -> None:
    """UsageError where `what` needs a worker of each contender live at once (module workers) on a platform that
    admits one process at a time."""
    if one_process_at_a_time(platform):
        raise UsageError(f"{what} keeps a worker of each contender on the device at once, and a {platform.upper()} "
                         "admits one process at a time",
                         hint="run it where the change also shows on the CPU: REPROBUNDLE_PLATFORMS=cpu (a bundle "
                              "packed with --platforms tpu,cpu), or isolate, whose pieces replay in alternation")


def platform_label(platform: str) -> str:
    return _LABELS.get(platform, platform)


def build_platform(build: str) -> str:
    """The platform of an environment build: "cuda12" -> "cuda"."""
    return "cuda" if build.startswith("cuda") else build


def parse_platform(text: str) -> tuple[str, str | None]:
    """A --platform value as (platform, build or None): "cuda" -> ("cuda", None), "cuda12" -> ("cuda", "cuda12"),
    "gpu" -> ("cuda", None); UsageError for anything else."""
    t = text.strip().lower()
    t = _ALIASES.get(t, t)
    if t in PLATFORMS:
        return t, ("cpu" if t == "cpu" else None)
    if t in BUILDS:
        return build_platform(t), t
    raise UsageError(f"unknown platform {text!r}", hint="use cpu, cuda (or cuda12, cuda13), rocm or tpu")


def canonical_platforms(platforms: Iterable[str]) -> list[str]:
    """Platform names as jax.export writes them, deduplicated, in order ("CUDA", "gpu" -> "cuda")."""
    out: list[str] = []
    for p in platforms:
        name = _ALIASES.get(str(p).strip().lower(), str(p).strip().lower())
        if name and name not in out:
            out.append(name)
    return out


# ------------------------------------------------------------------------------------------------ detection


@dataclass(frozen=True)
class Device:
    """The accelerators of one platform on this machine."""

    platform: str
    count: int
    kind: str  # "NVIDIA H200", "TPU", "AMD GPU"
    details: Mapping[str, str] = field(default_factory=dict)  # driver, cuda (the driver's CUDA version), ...

    def describe(self) -> str:
        extra = ", ".join(f"{k} {v}" for k, v in self.details.items())
        return f"{self.count} x {self.kind}" + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class Devices:
    """What this machine has: the CPU always, and the accelerators found."""

    accelerators: Mapping[str, Device] = field(default_factory=dict)
    source: str = "detected"  # or "REPROBUNDLE_PLATFORMS"

    @property
    def platforms(self) -> list[str]:
        return [p for p in ACCELERATORS if p in self.accelerators] + ["cpu"]

    def cuda_driver(self) -> tuple[int, int] | None:
        """The newest CUDA version the NVIDIA driver supports, (13, 0); None when unknown."""
        dev = self.accelerators.get("cuda")
        text = dev.details.get("cuda") if dev else None
        m = re.match(r"(\d+)\.(\d+)", text or "")
        return (int(m.group(1)), int(m.group(2))) if m else None

    def describe(self) -> str:
        parts = [f"{platform_label(p)}: {d.describe()}" for p, d in self.accelerators.items()]
        return "; ".join(parts) if parts else "CPU only"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _visible(count: int, var: str) -> int:
    """The devices a *_VISIBLE_DEVICES variable leaves visible of `count`."""
    value = os.environ.get(var)
    if value is None:
        return count
    value = value.strip()
    if value in ("", "-1", "none", "NoDevFiles"):
        return 0
    return min(count, len([v for v in value.split(",") if v.strip()]))


def _cuda_driver_version() -> str | None:
    """The CUDA version the driver supports ("13.0"), from libcuda's cuDriverGetVersion (no context is created)."""
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except (OSError, AttributeError):
        return None


def _nvidia() -> Device | None:
    models = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        m = re.search(r"^Model:\s*(.+)$", _read(info), re.MULTILINE)
        models.append(m.group(1).strip() if m else "NVIDIA GPU")
    if not models and shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                                 stdin=subprocess.DEVNULL).stdout
            models = [m.group(1).strip() for m in re.finditer(r"^GPU \d+: (.+?)(?: \(UUID.*)?$", out, re.MULTILINE)]
    count = _visible(len(models), "CUDA_VISIBLE_DEVICES")
    if not count:
        return None
    details = {}
    m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", _read("/proc/driver/nvidia/version"))
    if m:
        details["driver"] = m.group(1)
    cuda = _cuda_driver_version()
    if cuda:
        details["cuda"] = cuda
    kinds = sorted(set(models))
    return Device("cuda", count, kinds[0] if len(kinds) == 1 else " + ".join(kinds), details)


def _amd() -> Device | None:
    if not os.path.exists("/dev/kfd"):
        return None
    gpus = 0
    for props in glob.glob("/sys/class/kfd/kfd/topology/nodes/*/properties"):
        m = re.search(r"^gfx_target_version\s+(\d+)", _read(props), re.MULTILINE)
        if m and int(m.group(1)) > 0:
            gpus += 1
    count = _visible(gpus, "HIP_VISIBLE_DEVICES")
    return Device("rocm", count, "AMD GPU") if count else None


# The PCI device ids of TPU chips under Google's vendor id (the public tpu-info tool's table); Google's other PCI
# functions on a TPU VM (its network card, its disks) are not chips. 0x0027 is a v2 or v3 by its subsystem id.
_TPU_CHIP_IDS = {"0x005e": "v4", "0x0062": "v5p", "0x0063": "v5 lite", "0x006f": "v6 lite", "0x0076": "7x"}
_TPU_V2_V3 = {"0x004e": "v2", "0x004f": "v3"}


def _tpu_chip(device: str) -> str | None:
    """The TPU generation of a PCI device folder of Google's vendor id; None for its other functions."""
    device_id = _read(os.path.join(device, "device")).strip()
    if device_id == "0x0027":
        return _TPU_V2_V3.get(_read(os.path.join(device, "subsystem_device")).strip(), "v2/v3")
    return _TPU_CHIP_IDS.get(device_id)


def _tpu() -> Device | None:
    """The TPU chips this host can open: their device files (/dev/vfio/N from v5 on, /dev/accelN before), else the
    chips on the PCI bus (a sandbox may show a whole host's chips there but open one), as many as TPU_VISIBLE_CHIPS
    leaves visible; the kind as JAX names it ("TPU v5 lite"). TPU_ACCELERATOR_TYPE (v5litepod-4) names the slice,
    not this host's chips: kept as a detail."""
    kinds = [_tpu_chip(os.path.dirname(vendor)) for vendor in glob.glob("/sys/bus/pci/devices/*/vendor")
             if _read(vendor).strip() == GOOGLE_PCI_VENDOR]
    chips = [kind for kind in kinds if kind]
    if not chips:
        return None
    opened = glob.glob("/dev/vfio/[0-9]*") or glob.glob("/dev/accel[0-9]*")
    count = _visible(min(len(opened), len(chips)) if opened else len(chips), "TPU_VISIBLE_CHIPS")
    if not count:
        return None
    slice_type = os.environ.get("TPU_ACCELERATOR_TYPE", "").strip()
    kind = "TPU " + chips[0] if len(set(chips)) == 1 else "TPU"
    return Device("tpu", count, kind, {"slice": slice_type} if slice_type else {})


def detect_devices() -> Devices:
    """The accelerators on this machine (REPROBUNDLE_PLATFORMS, a comma-separated list, replaces detection)."""
    forced = settings().platforms
    if forced:
        names = canonical_platforms(forced.split(","))
        bad = [p for p in names if p not in PLATFORMS]
        if bad:
            raise UsageError(f"REPROBUNDLE_PLATFORMS names unknown platforms: {', '.join(bad)}",
                             hint="a comma-separated list of cpu, cuda, rocm, tpu")
        return Devices({p: Device(p, 1, platform_label(p)) for p in names if p in ACCELERATORS},
                       source="REPROBUNDLE_PLATFORMS")
    found = {}
    for probe in (_nvidia, _amd, _tpu):
        try:
            dev = probe()
        except Exception as e:  # detection is best effort: a strange /sys never stops a CPU replay
            log.debug("device detection %s failed: %s", probe.__name__, e)
            dev = None
        if dev is not None:
            found[dev.platform] = dev
    devices = Devices(found)
    log.info("devices here: %s", devices.describe())
    return devices


# ------------------------------------------------------------------------------------------------ the choice


@dataclass(frozen=True)
class PlatformChoice:
    platform: str  # "cpu", "cuda", "rocm", "tpu"
    build: str | None  # "cuda12"/"cuda13" when asked for; None lets the environment manager pick (cpu: "cpu")
    reason: str


def platform_here(override: str | None = None) -> tuple[str, str | None]:
    """(platform, build or None) of what runs with no bundle to choose by (`envs --add`): --platform, else the first
    accelerator this machine has, else the CPU."""
    if override:
        return parse_platform(override)
    platform = detect_devices().platforms[0]
    return platform, "cpu" if platform == "cpu" else None


def choose_platform(bundle_platforms: Sequence[str], present: Iterable[str], override: str | None = None,
                    *, what: str = "the bundle") -> PlatformChoice:
    """The platform to replay on: pure, from the platforms the bundle was lowered for, those this machine has
    devices for (the CPU always) and the --platform the user gave, if any.

    Without an override: the first of the bundle's accelerator platforms present here (in the bundle's order), else
    the CPU if the bundle was lowered for it, else ReplayError saying what would run it. An override must be one of
    the bundle's platforms (UsageError otherwise); it is honoured even when no such device was detected (detection
    can miss; the environment's own check then says what is wrong).
    """
    lowered = canonical_platforms(bundle_platforms) or ["cpu"]
    here = set(canonical_platforms(present)) | {"cpu"}
    listed = ", ".join(lowered)
    if override:
        platform, build = parse_platform(override)
        if platform not in lowered:
            raise UsageError(
                f"{what} was exported for {listed} only, so it cannot run on {platform}",
                hint=f"drop --platform, or pack it again with --platforms {','.join([*lowered, platform])} "
                     "(jax.export lowers for several platforms on any machine)")
        note = "" if platform in here else f"; no {platform_label(platform)} was detected here"
        return PlatformChoice(platform, build, f"--platform {override}{note}")
    for platform in lowered:
        if platform in ACCELERATORS and platform in here:
            return PlatformChoice(platform, None, f"{what} was lowered for {listed}; this machine has "
                                                  f"{platform_label(platform)}s")
    if "cpu" in lowered:
        extra = [p for p in lowered if p != "cpu"]
        why = (f"no {' or '.join(platform_label(p) for p in extra)} here" if extra else "it was lowered for cpu only")
        return PlatformChoice("cpu", "cpu", f"{what} was lowered for {listed}; {why}")
    needs = " or ".join(platform_label(p) for p in lowered)
    raise ReplayError(
        f"{what} was exported for {listed} only, and this machine has no {needs}",
        hint=f"replay it on a machine with a {needs}, or pack it with --platforms {lowered[0]},cpu: a CPU then "
             "replays its numerics (not its timing)")
