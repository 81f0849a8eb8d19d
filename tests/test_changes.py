"""What changed between two releases, read from the releases themselves (worker/release_facts.py,
envs/release_facts.py, analysis/release_delta.py): every XLA flag with its default (from jaxlib's DebugOptions
descriptor, complete where `XLA_FLAGS=--help` is cut short), every JAX option, cached beside each environment; and
`bisect` naming the defaults that changed at its boundary. Real releases, no stand-ins."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from cli_runner import cli

from reprobundle import api
from reprobundle.analysis.release_delta import changed_defaults

pytestmark = pytest.mark.crossversion


def test_the_cpu_runtime_default_that_flipped_in_0_4_33_is_named(tmp_path):
    code, out, err = cli("changes", "0.4.31", "0.4.33", "--json")
    assert code == 0, err
    d = json.loads(out)
    flipped = {c["name"]: (c["a"], c["b"]) for c in d["xla_flags"]["changed"]}
    assert flipped["xla_cpu_use_thunk_runtime"] == (False, True)  # the story's 6-30x slower while loops
    assert d["complete"] and d["xla_flags"]["count_a"] >= 150 and d["revisions"]["b"]["jaxlib"] == "0.4.33"
    assert {"kind": "flag", "name": "xla_cpu_use_thunk_runtime", "a": False, "b": True} in changed_defaults(d)
    assert api.changes("0.4.31", "0.4.33")["cached"] == [True, True]  # read once, beside each environment
    code, out, _ = cli("changes", "0.4.31", "0.4.33")
    assert "changed  --xla_cpu_use_thunk_runtime: false -> true" in out


def test_the_prng_option_default_that_flipped_in_0_5_0_is_named():
    d = api.changes("0.4.38", "0.5.0")
    assert [(c["name"], c["a"], c["b"]) for c in d["jax_options"]["changed"]] == [
        ("jax_threefry_partitionable", False, True)]


def _help_flags(version: str) -> set[str]:
    """The flags `XLA_FLAGS=--help` prints on `version` (it aborts after printing; absl cuts the text short)."""
    env = api.environment_manager().ensure(version)
    done = subprocess.run([str(env.python_executable), "-I", "-c", "import jax; jax.numpy.ones(1)"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "XLA_FLAGS": "--help", "JAX_PLATFORMS": "cpu"})
    return set(re.findall(r"^\s*--(xla_[a-z0-9_]+)=", done.stdout + done.stderr, re.M))


def test_the_flag_list_is_complete_where_help_is_cut_short():
    from reprobundle.envs.release_facts import release_facts

    manager = api.environment_manager()
    old, new = (release_facts(manager.ensure(v))["xla_flags"] for v in ("0.4.31", "0.8.0"))
    printed_old, printed_new = _help_flags("0.4.31"), _help_flags("0.8.0")
    assert printed_old and printed_old <= set(old)  # every flag --help prints is there, with its type and default
    assert printed_new <= set(new) and len(new) > 2 * len(printed_new)  # 0.8.0's --help stops at ~80 of ~250
    assert old["xla_backend_optimization_level"] == {"type": "int32", "default": 3}


def test_a_release_that_does_not_exist_is_one_error():
    code, out, err = cli("changes", "0.4.31", "0.4.99")
    assert code == 2 and out == "" and "not a release" in err and "Traceback" not in err


def _libtpu_package(root, version: str, names: list[str]) -> None:
    """A libtpu package as pip lays it out (the module, its library, its dist-info), its library holding `names`
    between NULs as a compiled library's string table holds its flags' names, among other strings."""
    pkg = root / "libtpu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    table = b"\x00".join([b"\x7fELF", b"hlo-memory-scheduler", *(n.encode() for n in names), b"xla_tpu_",
                          b"not xla_tpu_a_flag", b"end"])
    (pkg / "libtpu.so").write_bytes(b"\x00" + table + b"\x00")
    info = root / f"libtpu-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: libtpu\nVersion: {version}\n")


def test_libtpu_flags_are_named_from_its_library_and_their_defaults_said_unknown_once(tmp_path, monkeypatch):
    """On a TPU the compiler is libtpu: its flags' names come from its library's strings (it tells no defaults),
    and `changes` lists those added and removed, with the one sentence why no default is shown."""
    import importlib

    from reprobundle.analysis.release_delta import LIBTPU_NO_DEFAULTS, release_delta
    from reprobundle.render.listing import changes_text
    from reprobundle.worker import release_facts as probe

    _libtpu_package(tmp_path / "old", "0.0.42.1", ["xla_tpu_enable_latency_hiding_scheduler",
                                                   "xla_tpu_enable_windowed_einsum_for_all_gather"])
    _libtpu_package(tmp_path / "new", "0.0.43", ["xla_tpu_enable_latency_hiding_scheduler", "xla_tpu_new_fusion"])
    found = []
    for folder in ("old", "new"):
        with monkeypatch.context() as m:
            m.syspath_prepend(str(tmp_path / folder))
            importlib.invalidate_caches()
            found.append(probe.libtpu_facts())
    assert found[0]["version"] == "0.0.42.1" and found[0]["flags"] == [
        "xla_tpu_enable_latency_hiding_scheduler", "xla_tpu_enable_windowed_einsum_for_all_gather"]
    base = {"revisions": {"jax": "0.10.2"}, "xla_flags": {}, "jax_options": {}}
    delta = release_delta("0.10.2", "0.10.3", {**base, "libtpu": found[0]}, {**base, "libtpu": found[1]})
    assert delta["libtpu"]["added"] == ["xla_tpu_new_fusion"]
    assert delta["libtpu"]["removed"] == ["xla_tpu_enable_windowed_einsum_for_all_gather"]
    text = changes_text(delta)
    assert "libtpu 0.0.42.1 -> 0.0.43: 2 -> 2 flags by name, 1 added, 1 removed" in text
    assert "added    --xla_tpu_new_fusion" in text and text.count(LIBTPU_NO_DEFAULTS) == 1
    assert release_delta("a", "b", base, base)["libtpu"] is None and "libtpu" not in changes_text(
        release_delta("a", "b", base, base))


def test_a_tpu_explanation_never_tries_a_gpu_or_cpu_flag():
    from reprobundle.investigate.explain.default_experiments import _on_platform

    assert _on_platform("xla_tpu_enable_latency_hiding_scheduler", "tpu") and _on_platform("xla_llvm_disable_expensive_passes", "tpu")
    assert not _on_platform("xla_gpu_enable_triton_gemm", "tpu") and not _on_platform("xla_cpu_use_thunk_runtime", "tpu")
    assert not _on_platform("xla_tpu_enable_latency_hiding_scheduler", "cuda")
