"""What a replay's answer says of its runs (#39, the smaller things): on a program with a lax.fori_loop and a
scalar input replayed on two releases whose jax rebuilds it at an older calling convention, each worker note once
(naming every release that noted it), each run's platform and device in --json, and a Reproduce block that names
the zip it asks to attach only with the command that writes it."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick
from cli_runner import cli

import reprobundle
from reprobundle.render.comparison import to_text

RELEASES = ("0.4.31", "0.4.33")  # both rebuild the bundle at calling convention 9 (the host's jax writes 10)


def _loop_step(x, lr):
    def body(i, h):
        return h - lr * jnp.tanh(h) * 0.1

    return jax.lax.fori_loop(0, 20, body, x)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    store = tmp_path_factory.mktemp("answers") / "store"
    reprobundle.pack(jax.jit(_loop_step), np.ones((3, 3), np.float32), np.float32(0.5), name="loop",
                     store=str(store), **quick.PACK)
    code, out, err = cli("replay", "loop", *(a for v in RELEASES for a in ("--jax", v)), "--rounds", "2",
                         "--repeat", "5", "--warmup", "1", "--no-profile", "--json", store=store)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.crossversion
def test_each_run_in_json_names_its_platform_and_device(replayed):
    runs = replayed["runs"]
    assert [r["requested"] for r in runs] == list(RELEASES) and all(r["status"] == "ok" for r in runs)
    for run in runs:
        assert run["platform"] == "cpu" and run["device_count"] == 1
        assert isinstance(run["device"], str) and run["device"]  # the CPU's model, as the worker recorded it
    assert len({r["device"] for r in runs}) == 1  # one machine


@pytest.mark.crossversion
def test_each_worker_note_is_said_once_naming_the_releases_that_noted_it(replayed):
    notes = replayed["comparison"]["notes"]
    assert len(notes) == len(set(notes))
    convention = [n for n in notes if "calling_convention_version" in n]
    # one note for both releases, of the route that loaded the module (not again for a route that failed after it)
    assert len(convention) == 1, convention
    assert convention[0].startswith(f"jax {', '.join(RELEASES)}: ")
    loaded_by = {r["route"] for r in replayed["runs"]}
    assert len(loaded_by) == 1 and convention[0].split(": ")[1] == loaded_by.pop()


@pytest.mark.crossversion
def test_the_reproduce_block_names_the_zip_with_the_command_that_writes_it(replayed):
    rep = replayed["comparison"]["reproduce"]
    assert (rep["attach"], rep["export_command"]) == ("loop-1.zip", f"reprobundle export loop@1 -o loop-1.zip"
                                                                    f" --store {rep['export_command'].split()[-1]}")
    text = " ".join(to_text(replayed["comparison"]).split())  # unwrapped
    assert f"bundle: write it with `{rep['export_command']}`, then attach loop-1.zip to the issue" in text
    assert text.count("loop-1.zip to the issue") == 1
