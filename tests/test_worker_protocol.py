"""The worker's protocol checked the way manifests are: the jobs the host's own code writes (run/execution.py
build_job) and the results real workers write, read back as the host reads them, against their JSON Schemas
(schemas/worker-job-v1, worker-result-v1); and the typed records of worker/records.py against the schemas'
properties, so that neither definition can drift from the other."""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

import jax
import jax.numpy as jnp
import jsonschema
import msgpack
import numpy as np
import pytest

import reprobundle
from reprobundle.bundle.registry import Registry
from reprobundle.bundle.schema import SCHEMA_DIR, fast_validator
from reprobundle.run.contenders import FROZEN, ContenderSpec, Settings
from reprobundle.run.execution import Timing, WorkerProcess, build_job
from reprobundle.worker.records import Description, Job, Result

KINDS = {"worker-job": Job, "worker-result": Result}
WORKER_TIMEOUT_S = 600.0  # generous: jax's import on a loaded machine; a hang still ends


def _schema(kind: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{kind}-v1.schema.json").read_text())


def assert_valid(obj: dict, kind: str) -> None:
    """Valid by jsonschema (its message names the field) and by the compiled validator the package uses."""
    jsonschema.Draft202012Validator(_schema(kind)).validate(obj)
    fast_validator(kind, 1)(obj)


# -- the records and the schemas say the same ------------------------------------------------------------------


def _resolve(node: dict, root: dict) -> dict:
    while "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _object_schemas(node: dict, root: dict) -> list[dict]:
    """The object schemas with properties a field's schema allows, through $ref, oneOf/anyOf and array items."""
    node = _resolve(node, root)
    found = [node] if "properties" in node else []
    for key in ("oneOf", "anyOf"):
        for sub in node.get(key, []):
            found += _object_schemas(sub, root)
    if isinstance(node.get("items"), dict):
        found += _object_schemas(node["items"], root)
    return found


def _records_in(hint) -> list:
    """The TypedDicts a field's type holds, through Optional/Union and list."""
    if typing.is_typeddict(hint):
        return [hint]
    return [record for arg in typing.get_args(hint) for record in _records_in(arg)]


def drift(record, schema: dict, root: dict, where: str) -> list[str]:
    """Where a TypedDict and an object schema disagree: field names, which are required, nested records, an open
    schema for a closed record."""
    problems = []
    hints = typing.get_type_hints(record)
    props, keys = set(schema["properties"]), set(hints)
    if props != keys:
        problems.append(f"{where}: only in the record {sorted(keys - props)}, only in the schema {sorted(props - keys)}")
    if set(schema.get("required", ())) != set(record.__required_keys__):
        problems.append(f"{where}: required {sorted(record.__required_keys__)} in the record, "
                        f"{sorted(schema.get('required', ()))} in the schema")
    if schema.get("additionalProperties", True) is not False:
        problems.append(f"{where}: the schema takes fields the record does not name")
    for key in sorted(keys & props):
        records, objects = _records_in(hints[key]), _object_schemas(schema["properties"][key], root)
        if len(records) != len(objects):
            problems.append(f"{where}.{key}: {len(records)} record(s) in the record, {len(objects)} in the schema")
            continue
        for inner, inner_schema in zip(records, objects):
            problems += drift(inner, inner_schema, root, f"{where}.{key}")
    return problems


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_typed_records_and_the_schemas_name_the_same_fields(kind):
    schema = _schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert drift(KINDS[kind], schema, schema, kind) == []


def test_a_record_that_drifts_from_its_schema_is_caught():
    class Drifted(typing.TypedDict):
        protocol: int
        renamed: str

    problems = drift(Drifted, _schema("worker-job"), _schema("worker-job"), "job")
    assert any("only in the record ['renamed']" in p for p in problems), problems
    assert any("required" in p for p in problems), problems


def test_the_schemas_refuse_what_the_worker_would_not_take():
    job = {"protocol": 1, "function": {"exported": None, "mlir_module": None, "mlir_module_compat": None,
                                       "stablehlo_text": None, "fields": None},
           "inputs": [{"shape": [2], "dtype": "float32", "path": "/x.bin"}], "outputs_dir": "/o", "artifacts_dir": "/a"}
    assert_valid(job, "worker-job")
    for broken in ({**job, "protocol": 2}, {**job, "routes": ["teleport"]}, {**job, "unknown": 1},
                   {**job, "inputs": [{"shape": [2], "dtype": "float32"}]}):  # a leaf with neither data nor spec
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(_schema("worker-job")).validate(broken)


# -- real jobs and results ---------------------------------------------------------------------------------------


def _f(x, y):
    return jnp.tanh(x @ y).T, (x * 2).sum()


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A small bundle packed by the library (its reference run is a worker too): the registry and its manifest."""
    store = tmp_path_factory.mktemp("store")
    rng = np.random.default_rng(3)
    args = (rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((16, 4), dtype=np.float32))
    reprobundle.pack(jax.jit(_f), *args, name="protocol", store=str(store), warmup=1, repeat=2, dump=False,
                     profile=False)
    registry = Registry.open(store)
    return registry, registry.resolve("protocol@1").manifest


def _jobs(registry: Registry, manifest: dict, base: Path) -> dict[str, Path]:
    """One job per shape of result: timed in lockstep with a profile, a dump and a contender's settings; a
    describe; an error (an input of the wrong size); incompatible (no route possible)."""
    function, leaves = manifest["function"], manifest["inputs"]["leaves"]
    timing = Timing(warmup=1, repeat=2)
    settings = Settings(env=(("REPROBUNDLE_PROTOCOL_TEST", "1"),))
    no_files = dict(function, exported=None, mlir_module=None, mlir_module_compat=None, stablehlo_text=None)
    wrong_size = [dict(leaves[0], shape=[leaves[0]["shape"][0] + 1, *leaves[0]["shape"][1:]]), *leaves[1:]]
    made = {
        "timed": build_job(registry, function, leaves, base / "timed", timing=timing, dump=True, profile=True,
                           lockstep=True, platform="cpu", contender=ContenderSpec(jax.__version__, FROZEN, settings)),
        "describe": build_job(registry, function, leaves, base / "describe", timing=timing, dump=False,
                              profile=False, routes=["deserialize"], describe=True, brief_environment=True),
        "error": build_job(registry, function, wrong_size, base / "error", timing=timing, dump=False, profile=False),
        "incompatible": build_job(registry, no_files, leaves, base / "incompatible", timing=timing, dump=False,
                                  profile=False),
    }
    return made


def _read(path: Path) -> dict:
    return msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)


def run_protocol(registry: Registry, manifest: dict, base: Path, python: str) -> dict:
    """The jobs, the provisional result of the lockstep worker while it waits for the host, and every outcome's
    result as the host read it; the workers run together."""
    jobs = _jobs(registry, manifest, base)
    workers = {name: WorkerProcess(python, path, timeout_s=WORKER_TIMEOUT_S, lockstep=(name == "timed"))
               for name, path in jobs.items()}
    timed = workers["timed"]
    assert timed.wait_ready() is not None
    provisional = _read(timed.result_path)  # written before the timed calls: a crash now would leave it
    times = timed.time_calls(3)
    outcomes = {name: w.finish() for name, w in workers.items()}
    return {"jobs": {name: _read(path) for name, path in jobs.items()}, "provisional": provisional, "times": times,
            "outcomes": outcomes}


@pytest.fixture(scope="module")
def protocol(packed, tmp_path_factory):
    registry, manifest = packed
    return run_protocol(registry, manifest, tmp_path_factory.mktemp("jobs"), sys.executable)


def check_protocol(protocol: dict, *, this_release: bool) -> None:
    """Every job and result valid; the results are the shapes asked for (on another release a describe may find
    this release's flatbuffer too new, and its profile may have no per-op events)."""
    for job in protocol["jobs"].values():
        assert_valid(job, "worker-job")
    assert protocol["provisional"]["phase"] == "timing"
    assert_valid(protocol["provisional"], "worker-result")
    outcomes = protocol["outcomes"]
    statuses = {name: o.status for name, o in outcomes.items()}
    if not this_release and statuses["describe"] == "incompatible":
        statuses["describe"] = "ok"
    assert statuses == {"timed": "ok", "describe": "ok", "error": "error", "incompatible": "incompatible"}, \
        {name: o.reason for name, o in outcomes.items()}
    for outcome in outcomes.values():
        assert_valid(outcome.result, "worker-result")
    timed = outcomes["timed"].result
    assert timed["samples_ns"] == protocol["times"]
    assert timed["environment"]["process"]["cpus"] and timed["function"]["nr_devices"] == 1
    assert all(a["skipped"] for a in outcomes["incompatible"].result["attempts"])
    assert outcomes["error"].result["route"] is None and "input leaf 0" in outcomes["error"].result["reason"]
    if this_release:
        assert {"profile_trace", "xla_dump", "hlo_after"} <= set(timed["artifacts"]) and timed["per_op"]
        assert set(outcomes["describe"].result["description"]) == set(Description.__annotations__)


def test_the_host_jobs_and_the_worker_results_follow_their_schemas(protocol):
    job = protocol["jobs"]["timed"]
    assert job["settings"]["env"] == {"REPROBUNDLE_PROTOCOL_TEST": "1"} and job["timing"]["lockstep"]
    check_protocol(protocol, this_release=True)


@pytest.mark.crossversion
def test_the_oldest_release_s_worker_results_follow_their_schemas(packed, tmp_path):
    """The same jobs and checks on jax 0.4.30, the oldest release the worker runs on."""
    from reprobundle.api import environment_manager

    registry, manifest = packed
    python = str(environment_manager().ensure("0.4.30").python_executable)
    check_protocol(run_protocol(registry, manifest, tmp_path, python), this_release=False)
