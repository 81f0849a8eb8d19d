"""Functions short enough to read at once, modules one responsibility: no function or method over cyclomatic
complexity MAX_COMPLEXITY (radon's count), no module over MAX_LINES lines (docs/architecture.md's standards)."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class

PACKAGE = Path(__file__).resolve().parent.parent / "reprobundle"
MAX_COMPLEXITY = 15
MAX_LINES = 800
# Generated, not written: fastjsonschema's validators (scripts/compile_schemas.py), one long function per schema.
GENERATED = PACKAGE / "bundle" / "compiled_schemas"


def _written() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if GENERATED not in p.parents]


def _blocks(blocks):
    for block in blocks:
        yield block
        if isinstance(block, Class):
            yield from _blocks(block.methods)
        yield from _blocks(getattr(block, "closures", ()))


def test_no_function_is_over_the_complexity_limit():
    over = []
    for path in _written():
        for block in _blocks(cc_visit(path.read_text())):
            if not isinstance(block, Class) and block.complexity > MAX_COMPLEXITY:
                over.append(f"{path.relative_to(PACKAGE.parent)}:{block.lineno} {block.fullname}: "
                            f"{block.complexity}")
    assert not over, f"split these into named steps (complexity > {MAX_COMPLEXITY}):\n" + "\n".join(over)


def test_no_module_is_over_the_line_limit():
    long = [f"{path.relative_to(PACKAGE.parent)}: {n} lines" for path in _written()
            if (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert not long, f"split these by responsibility (over {MAX_LINES} lines):\n" + "\n".join(long)


MAX_API_LINES = 1000  # api/ is a face: it checks, resolves and calls; the searches live in investigate/ (#57)


def test_the_api_is_a_face_under_its_line_limit():
    lines = {p.name: len(p.read_text().splitlines()) for p in sorted((PACKAGE / "api").glob("*.py"))}
    assert sum(lines.values()) < MAX_API_LINES, f"api/ is {sum(lines.values())} lines ({lines}): move what is no " \
                                                "face into the layer whose job it is (investigate/, run/, fleet/)"


def test_the_schema_folders_are_byte_identical():
    """The JSON Schemas ship in the package (reprobundle/schemas/, what the runtime validates against); schemas/ at
    the top is the copy readers find first. Both hold the same files, byte for byte."""
    shipped = PACKAGE / "schemas"
    copy = PACKAGE.parent / "schemas"
    names = sorted(p.name for p in shipped.glob("*.json"))
    assert names and names == sorted(p.name for p in copy.glob("*.json"))
    differ = [n for n in names if (shipped / n).read_bytes() != (copy / n).read_bytes()]
    assert not differ, f"schemas/ differs from reprobundle/schemas/ (the runtime's): {differ}; copy it over"


def test_the_run_statuses_are_one_list():
    """bundle/model.py's RunStatus is the list; manifest.RUN_STATUSES derives from it, and the run schemas' enum
    (which old readers keep) holds the same statuses."""
    import json

    from reprobundle.bundle import manifest as mf

    assert mf.RUN_STATUSES
    for path in sorted((PACKAGE / "schemas").glob("run-v*.schema.json")):
        schema = json.loads(path.read_text())
        assert tuple(schema["properties"]["status"]["enum"]) == mf.RUN_STATUSES, path.name
