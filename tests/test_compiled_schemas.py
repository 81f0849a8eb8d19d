"""The validators compiled ahead of time (scripts/compile_schemas.py) are the schemas as they are now, and decide as
the schema compiled at run time does."""

from __future__ import annotations

import hashlib
import importlib
import json

import fastjsonschema
import pytest
from small_bundle import copy_of

from reprobundle.bundle import schema
from reprobundle.bundle.manifest import MANIFEST_VERSION, RUN_VERSION
from reprobundle.bundle.registry import Registry


@pytest.mark.parametrize("kind, version", schema.COMPILED)
def test_each_compiled_validator_is_of_the_schema_file_as_it_is(kind, version):
    raw = (schema.SCHEMA_DIR / f"{kind}-v{version}.schema.json").read_bytes()
    module = importlib.import_module(f"reprobundle.bundle.compiled_schemas.{schema.compiled_module_name(kind, version)}")
    assert module.SCHEMA_SHA256 == hashlib.sha256(raw).hexdigest(), \
        f"schemas/{kind}-v{version}.schema.json changed: run scripts/compile_schemas.py"
    assert schema.fast_validator(kind, version) is module.validate


def test_the_current_versions_are_compiled_ahead():
    assert set(schema.COMPILED) == {("manifest", MANIFEST_VERSION), ("run", RUN_VERSION)}


def test_compiled_and_run_time_validators_decide_alike(small_store_template, tmp_path):
    registry = Registry.open(str(copy_of(small_store_template, tmp_path / "store")))
    manifest = registry.resolve("small").manifest
    fresh = fastjsonschema.compile({**json.loads((schema.SCHEMA_DIR / "manifest-v3.schema.json").read_text()),
                                    "$schema": schema.DRAFT})
    broken_dtype = json.loads(json.dumps(manifest))
    broken_dtype["inputs"]["leaves"][0]["dtype"] = "float7"
    unknown_field = {**manifest, "surprise": 1}
    for doc, ok in ((manifest, True), (broken_dtype, False), (unknown_field, False)):
        for validate in (schema.fast_validator("manifest", 3), fresh):
            try:
                validate(doc)
                accepted = True
            except fastjsonschema.JsonSchemaException:
                accepted = False
            assert accepted is ok
