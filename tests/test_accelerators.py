"""Accelerators on a CPU machine: platform choice, environments per (release, build), the CUDA and TPU requirement sets
resolved against the real package index (a dry run: metadata only, no CUDA library is downloaded), device metadata,
GPU per-op attribution from a real H200 trace, the hardware headline, and a multi-platform (cuda, cpu) bundle packed
and replayed here. What needs a GPU is scripts/gpu-check.sh.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
from pathlib import Path

import pytest
from cli_runner import cli

from reprobundle.analysis.hardware import hardware_note, hardware_text
from reprobundle.envs import platforms as pf
from reprobundle.envs.manager import (
    EnvironmentManager,
    choose_cuda_build,
    env_dir_name,
    requirements,
)
from reprobundle.envs.package_index import fetch_project_files, index_url, project_wheel
from reprobundle.errors import EnvironmentCreationError, ReplayError, UsageError

ROOT = Path(__file__).resolve().parent.parent
GPU_DATA = Path(__file__).parent / "data" / "gpu"
sys.path.insert(0, str(ROOT / "reprobundle"))  # the worker package, as the worker itself imports it
from worker.device_trace import entry_schedule  # noqa: E402
from worker.environment import device_environment, lowering_platform, out_of_memory  # noqa: E402
from worker.trace import reduce_trace  # noqa: E402

# ------------------------------------------------------------------------------------------ platform choice


@pytest.mark.parametrize("bundle,present,override,want", [
    (["cpu"], ["cpu"], None, ("cpu", "cpu")),
    (["cpu"], ["cuda", "cpu"], None, ("cpu", "cpu")),  # a CPU bundle replays on the CPU of a GPU machine
    (["cuda"], ["cuda", "cpu"], None, ("cuda", None)),
    (["cuda", "cpu"], ["cuda", "cpu"], None, ("cuda", None)),  # the accelerator it came from, when it is here
    (["cpu", "cuda"], ["cuda", "cpu"], None, ("cuda", None)),  # accelerators first, whatever the order
    (["cuda", "cpu"], ["cpu"], None, ("cpu", "cpu")),  # numerics on a CPU-only machine
    (["tpu", "cuda", "cpu"], ["cuda", "cpu"], None, ("cuda", None)),
    (["cuda", "cpu"], ["cuda", "cpu"], "cpu", ("cpu", "cpu")),  # --platform cpu on a GPU machine
    (["cuda", "cpu"], ["cuda", "cpu"], "cuda12", ("cuda", "cuda12")),
    (["cuda", "cpu"], ["cuda", "cpu"], "gpu", ("cuda", None)),
    (["cuda"], ["cpu"], "cuda", ("cuda", None)),  # an override is honoured when detection finds nothing
    (["CUDA", "cpu"], ["cpu"], None, ("cpu", "cpu")),
])
def test_choose_platform(bundle, present, override, want):
    choice = pf.choose_platform(bundle, present, override)
    assert (choice.platform, choice.build) == want, choice
    assert choice.reason


def test_choose_platform_says_what_cannot_run():
    with pytest.raises(ReplayError) as e:
        pf.choose_platform(["cuda"], ["cpu"], what="attention@1")
    assert "exported for cuda only" in e.value.message and "NVIDIA GPU" in e.value.message
    assert "--platforms cuda,cpu" in e.value.hint
    with pytest.raises(UsageError) as e:
        pf.choose_platform(["cuda", "cpu"], ["cuda", "cpu"], "tpu")
    assert "cannot run on tpu" in e.value.message and "--platforms cuda,cpu,tpu" in e.value.hint
    with pytest.raises(UsageError):
        pf.choose_platform(["cpu"], ["cpu"], "metal")
    assert "no NVIDIA GPU was detected" in pf.choose_platform(["cuda"], ["cpu"], "cuda").reason


def test_platform_names():
    assert pf.parse_platform("cuda13") == ("cuda", "cuda13")
    assert pf.parse_platform(" GPU ") == ("cuda", None)
    assert pf.parse_platform("cpu") == ("cpu", "cpu")
    assert pf.canonical_platforms(["CUDA", "gpu", "cpu", "cuda"]) == ["cuda", "cpu"]
    assert pf.build_platform("cuda12") == "cuda" and pf.build_platform("tpu") == "tpu"


def test_detection_override_and_visible_devices(monkeypatch):
    monkeypatch.setenv("REPROBUNDLE_PLATFORMS", "cpu,cuda")
    devices = pf.detect_devices()
    assert devices.platforms == ["cuda", "cpu"] and devices.source == "REPROBUNDLE_PLATFORMS"
    monkeypatch.setenv("REPROBUNDLE_PLATFORMS", "cpu,npu")
    with pytest.raises(UsageError):
        pf.detect_devices()
    monkeypatch.delenv("REPROBUNDLE_PLATFORMS")
    assert "cpu" in pf.detect_devices().platforms  # whatever this machine has, the CPU is there
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert pf._visible(8, "CUDA_VISIBLE_DEVICES") == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert pf._visible(8, "CUDA_VISIBLE_DEVICES") == 2
    dev = pf.Devices({"cuda": pf.Device("cuda", 1, "NVIDIA H200", {"driver": "580.159.04", "cuda": "13.0"})})
    assert dev.cuda_driver() == (13, 0) and "NVIDIA H200" in dev.describe()


# ------------------------------------------------------------------------------------------ environments


def test_cuda_build_choice():
    assert choose_cuda_build(["cuda13", "cuda12"], (13, 0)) == "cuda13"
    assert choose_cuda_build(["cuda13", "cuda12"], (12, 8)) == "cuda12"  # the driver decides
    assert choose_cuda_build(["cuda12"], None) == "cuda12"
    assert choose_cuda_build(["cuda13"], (12, 4)) is None
    assert choose_cuda_build([], (13, 0)) is None


def test_requirements_per_build():
    assert requirements("0.7.2", "0.7.2")[0] == ["jax==0.7.2", "jaxlib==0.7.2", "numpy", "msgpack", "flatbuffers"]
    assert requirements("0.7.2", "0.7.2", "cuda13")[0][0] == "jax[cuda13]==0.7.2"
    assert requirements("0.4.25", "0.4.25", "cuda12")[0][2] == "numpy<2"
    reqs, options = requirements("0.4.30", "0.4.30", "tpu")
    assert reqs[0] == "jax[tpu]==0.4.30" and options[0] == "--find-links"  # libtpu-nightly is not on PyPI
    assert requirements("0.8.0", "0.8.0", "tpu")[1] == []
    assert env_dir_name("0.7.2", "cpu", "3.11") == "jax-0.7.2-py3.11"  # the CPU build keeps its old name
    assert env_dir_name("0.7.2", "cuda12", "3.11") == "jax-0.7.2-cuda12-py3.11"
    linux_x86 = frozenset({"manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "linux_x86_64"})  # platform tags
    wheel = project_wheel("jax_cuda12_plugin-0.7.2-cp312-cp312-manylinux_2_27_x86_64.whl", "jax-cuda12-plugin",
                          linux_x86)
    assert wheel is not None and wheel[1] == [12] and wheel[2]
    pure = project_wheel("jax_cuda12_pjrt-0.7.2-py3-none-manylinux_2_27_x86_64.whl", "jax-cuda12-pjrt", linux_x86)
    assert pure is not None and pure[1] is None


def _fake_env(root: Path, name: str, version: str, build: str | None) -> Path:
    env = root / name
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    meta = {"jax_version": version, "python_version": "3.11.7", "created": "2026-11-30T00:00:00+00:00",
            "size_bytes": 100, "jaxlib_version": version}
    if build:
        meta.update(build=build, platform=pf.build_platform(build), shared_bytes=60)
    (env / "reprobundle-env.json").write_text(json.dumps(meta))
    return env


def test_environments_per_build_and_old_cpu_names(tmp_path, monkeypatch):
    """An environment folder made before platforms existed (no build in its name or metadata) is the CPU build; each
    build is found, listed and removed on its own."""
    monkeypatch.setenv("REPROBUNDLE_PLATFORMS", "cpu,cuda")
    root = tmp_path / "envs"
    _fake_env(root, "jax-0.7.2-py3.11", "0.7.2", None)  # as every release before this one named it
    _fake_env(root, "jax-0.7.2-cuda12-py3.11", "0.7.2", "cuda12")
    _fake_env(root, "jax-0.7.2-cuda13-py3.11", "0.7.2", "cuda13")
    _fake_env(root, "jax-0.7.2-tpu-py3.11", "0.7.2", "tpu")
    manager = EnvironmentManager(root)
    assert manager.ensure("0.7.2").path.name == "jax-0.7.2-py3.11"
    assert manager.ensure("0.7.2", platform="cuda", build="cuda12").path.name == "jax-0.7.2-cuda12-py3.11"
    assert manager.ensure("0.7.2", platform="tpu").build == "tpu"
    manager._found_devices = pf.Devices({"cuda": pf.Device("cuda", 1, "GPU", {"cuda": "12.8"})})
    assert manager.ensure("0.7.2", platform="cuda").build == "cuda12"  # the driver runs CUDA 12 only
    manager._found_devices = pf.Devices({"cuda": pf.Device("cuda", 1, "GPU", {"cuda": "13.0"})})
    assert manager.ensure("0.7.2", platform="cuda").build == "cuda13"
    listed = [(e.build, e.platform) for e in manager.list()]
    assert listed == [("cpu", "cpu"), ("cuda12", "cuda"), ("cuda13", "cuda"), ("tpu", "tpu")]
    gone = manager.remove("0.7.2", platform="cuda")
    assert sorted(e.build for e in gone) == ["cuda12", "cuda13"]
    assert [e.build for e in manager.list()] == ["cpu", "tpu"]
    from reprobundle.render.listing import env_table

    table = env_table(manager.list())
    assert "PLATFORM" in table and "tpu" in table and "shared" in table


def test_environments_made_ahead_on_a_tpu_machine_are_its_tpu_builds(tmp_path, monkeypatch):
    """On a machine with a TPU (REPROBUNDLE_PLATFORMS=tpu, as detection says there), `envs --add` and `--add-commit`
    with no --platform take the release's TPU build: a commit is kept over `jax-0.7.2-tpu-...`, listed as a TPU
    environment; --platform cpu still names the CPU build."""
    from jax_history import _git

    root = tmp_path / "envs"
    over = _fake_env(root, "jax-0.7.2-tpu-py3.11", "0.7.2", "tpu")
    (over / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (over / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\ninclude-system-site-packages = false\n")
    repo = tmp_path / "jax"
    (repo / "jax").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "jax" / "version.py").write_text('_version: str = "0.7.3"\n_minimum_jaxlib_version: str = "0.7.2"\n'
                                             "_release_version: str | None = None\n_git_hash: str | None = None\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "after 0.7.2")
    sha = _git(repo, "rev-parse", "HEAD").strip()
    monkeypatch.setenv("REPROBUNDLE_ENV_DIR", str(root))
    monkeypatch.setenv("REPROBUNDLE_PLATFORMS", "cpu,tpu")
    assert pf.platform_here() == ("tpu", None) and pf.platform_here("cpu") == ("cpu", "cpu")
    code, out, err = cli("envs", "--add", "0.7.2", "--json")
    assert code == 0 and json.loads(out)[0]["path"] == str(over) and not json.loads(out)[0]["built"], err
    code, out, err = cli("envs", "--add-commit", sha[:8], "--over", "0.7.2", "--jax-repo", repo, "--json")
    assert code == 0, err
    (added,) = json.loads(out)
    assert added["path"] == str(root / "jax-commits" / "kept" / f"{sha[:12]}-over-{over.name}")
    assert (added["build"], added["platform"], added["over"]) == ("tpu", "tpu", "0.7.2")
    stamped = next(Path(added["path"]).glob("lib/python3*/site-packages/jax/version.py")).read_text()
    assert f"_release_version: str = '0.7.3.dev0+{sha[:12]}'" in stamped and f"_git_hash: str = '{sha}'" in stamped
    code, out, _ = cli("envs", "--platform", "tpu", "--json")
    assert [e["jax"] for e in json.loads(out)] == ["0.7.2", f"0.7.3.dev0+{sha[:12]}"]
    code, out, _ = cli("envs", "--remove", "0.7.2", "--json")  # its release gone, the commit over it goes too
    assert sorted(e["jax"] for e in json.loads(out)) == ["0.7.2", f"0.7.3.dev0+{sha[:12]}"]


def _index_reachable() -> str | None:
    try:
        fetch_project_files(index_url(), "jax-cuda12-pjrt", timeout=20)
    except (OSError, urllib.error.URLError) as e:
        return f"{type(e).__name__}: {e}"
    return None


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    why = _index_reachable()
    if why is not None:
        pytest.skip(f"the package index {index_url()} is unreachable ({why}): nothing to resolve against")
    return EnvironmentManager(tmp_path_factory.mktemp("plans"))


@pytest.mark.parametrize("version,platform,build,expect", [
    ("0.4.30", "cuda", "cuda12", ["jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cublas-cu12", "nvidia-cudnn-cu12"]),
    ("0.7.2", "cuda", "cuda12", ["jax-cuda12-plugin", "nvidia-cudnn-cu12"]),
    ("0.7.2", "cuda", "cuda13", ["jax-cuda13-plugin", "jax-cuda13-pjrt", "nvidia-cudnn-cu13"]),
    ("latest", "cuda", "cuda13", ["jax-cuda13-plugin", "nvidia-cudnn-cu13"]),
    ("0.5.3", "tpu", None, ["libtpu"]),
    ("0.7.2", "tpu", None, ["libtpu"]),
    ("latest", "tpu", None, ["libtpu"]),
])
@pytest.mark.slow
def test_accelerator_requirements_resolve_on_the_index(planner, version, platform, build, expect):
    """The requirement sets of CUDA and TPU environments, resolved by uv against the real index: metadata only."""
    try:
        plan = planner.plan(version, platform=platform, build=build)
    except EnvironmentCreationError as e:  # an index of its own (a TPU machine's offline one) holds a few releases
        if "not an installable release" not in str(e):
            raise
        pytest.skip(f"{e}: this index does not hold the release")
    assert plan["platform"] == platform and plan["name"].startswith(f"jax-{plan['version']}-{plan['build']}-py")
    pins = planner.resolve(plan)
    assert pins["jax"] == plan["version"] and pins["jaxlib"] == plan["jaxlib"]
    for package in expect:
        assert package in pins, (package, sorted(pins))
    if plan["build"].startswith("cuda"):
        assert pins[f"jax-{plan['build']}-plugin"] == plan["jaxlib"]


def test_cuda_builds_follow_the_index(planner):
    """0.4.30 has no CUDA 13 wheels: without a driver to say otherwise the newest build it has is picked."""
    planner._found_devices = pf.Devices({"cuda": pf.Device("cuda", 1, "GPU", {})})
    assert planner.plan("0.4.30", platform="cuda")["build"] == "cuda12"
    assert planner.plan("0.7.2", platform="cuda")["build"] == "cuda13"
    with pytest.raises(Exception) as e:
        planner.plan("0.4.30", platform="cuda", build="cuda13")
    assert "no cuda13 wheels" in str(e.value)


# ------------------------------------------------------------------------------------------ the worker


def test_gpu_kernels_attributed_to_hlo_ops():
    """A real trace of examples/attention.py on an NVIDIA H200 (jax 0.11.2, CUDA 13): every kernel runs inside a
    CUDA graph, so `hlo_op` names the command buffer; XLA's kernels are found by name, cuBLAS's by schedule."""
    hlo = (GPU_DATA / "attention-h200-0.11.2.hlo").read_text()
    reduced = reduce_trace(str(GPU_DATA / "attention-h200-0.11.2.perfetto.json.gz"), hlo, 3)
    rows = {r["name"]: r for r in reduced["rows"]}
    assert set(rows) == {"wrapped_concatenate", "custom-call.1", "loop_transpose_fusion.1", "loop_transpose_fusion.2",
                         "loop_transpose_fusion.3", "gemm_fusion_dot.6", "triton_softmax.2", "custom-call.0",
                         "loop_transpose_fusion", "custom-call.2"}
    assert all(r["count"] == 1 and r["total_count"] == 3 for r in rows.values())
    # the 64x256 tile cuBLAS gemm is the QKV projection (custom-call.1), the cutlass one P@V (custom-call.0)
    assert reduced["rows"][0]["name"] == "custom-call.1" and 17_000 < rows["custom-call.1"]["time_ns"] < 19_000
    assert rows["custom-call.0"]["kind"] == "custom-call(__cublas$lt$matmul)"
    assert reduced["attributed_ns"] == pytest.approx(reduced["event_ns"])  # 100% covered
    assert reduced["how"]["name"] > 0 and reduced["how"]["schedule"] > 0 and reduced["how"]["annotation"] == 0
    assert "100.0% of the device time is attributed" in reduced["note"]
    assert reduced["source"].startswith("device kernels")
    assert [n for n, _ in entry_schedule(hlo)][:2] == ["wrapped_concatenate", "custom-call.1"]


def _trace(tmp_path, events):
    import gzip

    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return str(path)


def test_device_kernels_annotated_directly_and_tpu_op_lines(tmp_path):
    hlo = ("HloModule jit_f, is_scheduled=true\n\nENTRY %main (p: f32[8]) -> f32[8] {\n"
           "  %p = f32[8]{0} parameter(0)\n"
           "  %fusion.1 = f32[8]{0} fusion(%p), kind=kLoop, calls=%c\n"
           "  ROOT %custom-call.4 = f32[8]{0} custom-call(%fusion.1), custom_call_target=\"__cublas$gemm\"\n}\n")
    meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7(Compute)"}},
            {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/host:CPU"}}]
    events = meta + [
        {"ph": "X", "pid": 1, "tid": 7, "ts": 0, "dur": 2, "name": "fusion_1",
         "args": {"hlo_op": "fusion.1", "hlo_module": "jit_f"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 3, "dur": 6, "name": "sm90_gemm", "args": {"hlo_op": "custom-call.4",
                                                                                         "hlo_module": "jit_f"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 10, "dur": 1, "name": "convert", "args": {"hlo_module": "jit_other"}},
        {"ph": "X", "pid": 9, "tid": 1, "ts": 0, "dur": 50, "name": "host", "args": {"hlo_op": "fusion.1"}},
    ]
    reduced = reduce_trace(_trace(tmp_path, events), hlo, 1)
    assert [(r["name"], r["time_ns"]) for r in reduced["rows"]] == [("custom-call.4", 6000.0), ("fusion.1", 2000.0)]
    assert reduced["how"]["annotation"] == pytest.approx(8000.0)  # the other module's kernel is left out
    tpu = [{"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:TPU:0"}},
           {"ph": "M", "pid": 2, "tid": 1, "name": "thread_name", "args": {"name": "XLA Ops"}},
           {"ph": "M", "pid": 2, "tid": 2, "name": "thread_name", "args": {"name": "XLA Modules"}},
           {"ph": "X", "pid": 2, "tid": 1, "ts": 0, "dur": 4, "name": "fusion.1", "args": {}},
           {"ph": "X", "pid": 2, "tid": 1, "ts": 5, "dur": 1, "name": "mystery", "args": {}},
           {"ph": "X", "pid": 2, "tid": 2, "ts": 0, "dur": 9, "name": "jit_f", "args": {}}]
    reduced = reduce_trace(_trace(tmp_path, tpu), hlo, 1)
    assert [r["name"] for r in reduced["rows"]] == ["fusion.1", "custom-call.4"]  # "mystery": the next library op
    assert reduced["event_ns"] == pytest.approx(5000.0)  # the derived "XLA Modules" line is not counted


def test_device_metadata_on_cpu_and_out_of_memory_words():
    import jax

    assert out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 240.00GiB"))
    assert not out_of_memory(ValueError("shapes do not match"))
    if jax.default_backend() != "cpu":  # a TPU machine: the worker's metadata is of the default backend's devices
        pytest.skip(f"the default backend here is {jax.default_backend()}: the CPU's metadata needs a CPU default")
    env = {"platform": jax.default_backend(), "cpu_model": "Some CPU", "env_vars": {}}
    device_environment(env)
    assert env["platform"] == "cpu" == lowering_platform() and env["device_kind"] == "Some CPU"
    assert env["device_count"] >= 1 and "accelerator" not in env


# ------------------------------------------------------------------------------------------ reports


def test_hardware_headline():
    h200 = {"platform": "cuda", "device_kind": "NVIDIA H200", "device_count": 1, "cpu_model": "Xeon"}
    cpu = {"platform": "cpu", "device_kind": "AMD EPYC 7B13", "cpu_model": "AMD EPYC 7B13"}
    note = hardware_note(h200, [cpu])
    assert note.startswith("packed on NVIDIA H200, replayed on CPU (AMD EPYC 7B13): timings are not comparable")
    assert "TF32" in note
    assert hardware_note(h200, [dict(h200)]) is None
    assert hardware_note({"platform": "cpu", "cpu_model": "A"}, [{"platform": "cpu", "cpu_model": "B"}]) is None
    assert "NVIDIA A100" in hardware_note(h200, [{**h200, "device_kind": "NVIDIA A100"}])
    assert hardware_text({"platform": "tpu", "device_kind": "TPU v6 lite", "device_count": 8}) == "8 x TPU v6 lite"
    assert hardware_text({"platform": "gpu"}) == "NVIDIA GPU"  # a record from before the platform was canonical
    assert hardware_note({}, [cpu]) is None and hardware_note(h200, []) is None
    from reprobundle.analysis.comparison import _hardware_headline

    heads = _hardware_headline({"environment": h200}, [{"status": "ok", "environment": cpu},
                                                        {"status": "error", "environment": {}}])
    assert len(heads) == 1 and heads[0]["hardware"] and heads[0]["text"].startswith("packed on NVIDIA H200")
    assert _hardware_headline({"environment": h200}, [{"status": "ok", "environment": h200}]) == []


# ------------------------------------------------------------------------------------------ end to end on a CPU


@pytest.mark.crossversion
def test_multi_platform_bundle_packed_and_replayed_on_cpu(store_dir):
    """pack --platforms cuda,cpu on a machine without a GPU: one artifact for both, the reference on the CPU; it
    replays here on the installed JAX and on 0.7.2, each run saying it ran on the CPU."""
    why = _index_reachable()
    if why is not None:  # a machine with no network (the TPU machine) cannot make 0.7.2's environment
        pytest.skip(f"the package index {index_url()} is unreachable ({why}): 0.7.2 cannot be installed")
    code, out, err = cli("pack", str(ROOT / "examples/attention.py:make_small"), "--name", "mp", "--platforms",
                         "cuda,cpu", "--repeat", "3", "--warmup", "1", "--json", store=store_dir)
    assert code == 0, err
    from reprobundle.bundle.registry import Registry

    m = Registry.open(store_dir).resolve("mp").manifest
    assert m["function"]["fields"]["platforms"] == ["cuda", "cpu"]
    env = m["environment"]
    assert env["platform"] == "cpu" and env["device_kind"] and env["device_count"] >= 1
    code, out, err = cli("replay", "mp", "--jax", "installed", "--jax", "0.7.2", "--repeat", "4", "--rounds", "2",
                         "--json", store=store_dir)
    assert code == 0, err
    runs = Registry.open(store_dir).runs(Registry.open(store_dir).resolve("mp").ref.bundle_id)
    assert {r["requested"] for r in runs} == {"installed", "0.7.2"}
    for run in runs:
        assert run["status"] == "ok" and run["check"]["ok"], run["reason"]
        assert run["environment"]["platform"] == "cpu"
    data = json.loads(out)
    assert not any(h.get("hardware") for h in data["comparison"]["headlines"])  # CPU then CPU: comparable
    code, out, err = cli("replay", "mp", "--platform", "tpu", store=store_dir)
    assert code == 2 and "exported for cuda, cpu only" in err
    code, out, err = cli("pack", str(ROOT / "examples/attention.py:make_small"), "--name", "cuda-only",
                         "--platforms", "cuda", store=store_dir)
    if "cuda" not in pf.detect_devices().platforms:
        assert code != 0 and "no reference run can be made here" in err and "--platforms cuda,cpu" in err


def test_unknown_platform_names_are_usage_errors(store_dir):
    code, out, err = cli("pack", str(ROOT / "examples/attention.py:make_small"), "--name", "x", "--platforms",
                         "cuda,quantum", store=store_dir)
    assert code == 2 and "quantum" in err
    assert os.environ.get("REPROBUNDLE_STORE")  # the conftest isolates the default store


def test_a_tpu_runs_system_rows_name_libtpu_and_its_init_args():
    """The issue's system table of a run on a TPU (a record as the borrowed v5e machine wrote it): the chip, libtpu's
    version and LIBTPU_INIT_ARGS."""
    from reprobundle.investigate.report.issue_facts import environment_rows

    env = {"jax": "0.10.2", "devices": [{"id": 0, "kind": "TPU v5 lite", "platform": "tpu"}],
           "accelerator": {"accelerator_type": "v5litepod-4", "packages": {"libtpu": "0.0.42.1"}},
           "env_vars": {"JAX_PLATFORMS": "tpu", "LIBTPU_INIT_ARGS": " --xla_tpu_use_enhanced_launch_barrier=true"}}
    rows = dict(environment_rows(env))
    assert rows["devices"] == "1 x TPU v5 lite" and rows["libtpu"] == "0.0.42.1"
    assert rows["LIBTPU_INIT_ARGS"] == "--xla_tpu_use_enhanced_launch_barrier=true" and rows["XLA_FLAGS"] == "(not set)"


def test_minimize_on_a_tpu_says_it_needs_two_processes_at_once_and_bisections_probe_one_at_a_time(store_dir,
                                                                                                   monkeypatch):
    """A TPU admits one process at a time, so minimize (a module worker per contender, live together) is refused
    there with the way out, before any worker starts; the CPU path of the same bundle is untouched. A bisection's
    untimed probes there run one at a time by default (#50: concurrent workers cannot hold the chip, an (n+1)-ary
    step would only cost probes); on the CPU as many as before."""
    # packed in a process of its own with its reference on the CPU: on the TPU machine this test process holds the
    # chip once a test before it used jax there (seen on the borrowed v5e, 2026-12-05), and no worker could open it
    import subprocess

    packed = subprocess.run([sys.executable, "-m", "reprobundle", "pack", str(ROOT / "examples/attention.py:make_small"),
                             "--name", "tp", "--platforms", "tpu,cpu", "--repeat", "2", "--warmup", "1", "--no-dump",
                             "--no-profile"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "REPROBUNDLE_STORE": str(store_dir), "JAX_PLATFORMS": "cpu",
                                 "REPROBUNDLE_PLATFORMS": "cpu"})
    assert packed.returncode == 0, packed.stderr
    monkeypatch.setenv("REPROBUNDLE_PLATFORMS", "tpu")  # as on the borrowed TPU machine
    code, _, err = cli("minimize", "tp", "--jax", "installed", "--variant",
                       "installed:XLA_FLAGS=--xla_cpu_enable_fast_math=false", store=store_dir)
    assert code == 2 and "a TPU admits one process at a time" in err and "REPROBUNDLE_PLATFORMS=cpu" in err, err
    from reprobundle import api
    from reprobundle.investigate.search.probes import probe_jobs
    from reprobundle.run.execution import default_jobs

    _, bundle = api.resolve("tp", str(store_dir))
    assert probe_jobs(bundle, api.ReplayOptions()) == default_jobs("tpu") == 1
    cpu = default_jobs("cpu")
    assert probe_jobs(bundle, api.ReplayOptions(platform="cpu")) == cpu == default_jobs()
    monkeypatch.setenv("REPROBUNDLE_PLATFORMS", "cpu")
    assert probe_jobs(bundle, api.ReplayOptions()) == cpu
