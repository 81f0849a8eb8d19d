"""The program a bundle can be retraced from: a script, the local modules it imports, its factory, its packages.

Read, never run: the imports are found in the source with `ast` (the script's, then each local module's), local
modules are the files under the script's folder that an import names, third-party packages are the distributions
that provide the other imported top-level names (with the versions installed here), minus the standard library and
what every JAX environment brings (jax, jaxlib and their dependencies). Files are bounded in size, and a file whose
name or content looks secret (`.env`, keys, certificates, a token-shaped string) is left out and listed as skipped,
never altered: a retrace that needs it then fails naming the missing module.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ..bundle.redaction import scrub
from ..errors import ScriptError

MAX_FILE_BYTES = 1 << 20
MAX_TOTAL_BYTES = 8 << 20
MAX_FILES = 200
# What jax==V brings into every environment: resolved with it, never recorded as the program's own.
JAX_OWN = frozenset({"jax", "jaxlib", "numpy", "ml-dtypes", "ml_dtypes", "opt-einsum", "opt_einsum", "scipy",
                     "reprobundle"})
SECRET_NAMES = (".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_ed25519*", "*credentials*",
                "*secret*", ".netrc", ".pypirc")


@dataclass
class Program:
    """The manifest's `function.program` before its files become blobs."""

    script: str  # relative to the program's root (the script's folder)
    factory: str
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content, the script first
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}
    packages: dict[str, str] = field(default_factory=dict)  # distribution -> version installed here
    static: list = field(default_factory=list)


def collect_program(script: Path, factory: str, static=()) -> Program:
    """The program of `script` (the factory's module) as pack stores it."""
    root = script.parent.resolve()
    program = Program(script=script.name, factory=factory, static=list(static))
    seen: set[Path] = set()
    todo = [script.resolve()]
    imported: set[str] = set()
    local: set[str] = set()
    total = 0
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        why = _refusal(rel, data, total)
        if why:
            if path == script.resolve():
                raise ScriptError(f"cannot store {rel} in the bundle: {why}",
                                  hint="move secrets out of the script; retrace needs its source")
            program.skipped.append({"path": rel, "reason": why})
            continue
        program.files[rel] = data
        total += len(data)
        try:
            tree = ast.parse(data, filename=str(path))
        except SyntaxError as e:
            raise ScriptError(f"{rel} does not parse: {e}") from None
        for name, level in _imports(tree):
            found = _local_files(root, path, name, level)
            if found:
                local.add(name.split(".")[0])
                todo.extend(f for f in found if f not in seen)
            elif level == 0:
                imported.add(name.split(".")[0])
    program.packages = third_party_packages(imported - local)
    return program


def _refusal(rel: str, data: bytes, total: int) -> str:
    name = rel.rsplit("/", 1)[-1].lower()
    if any(fnmatch.fnmatch(name, pattern) for pattern in SECRET_NAMES):
        return "its name looks like a secret's"
    if b"PRIVATE KEY-----" in data or scrub(data, [], patterns=True) != data:
        return "it holds a key or token-shaped string"
    if len(data) > MAX_FILE_BYTES:
        return f"{len(data)} bytes, more than {MAX_FILE_BYTES} per file"
    if total + len(data) > MAX_TOTAL_BYTES:
        return f"the program's files would pass {MAX_TOTAL_BYTES} bytes"
    return ""


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    """(module, level) of every import in the file, functions' included; `from pkg import sub` also names
    `pkg.sub` (it may be a module)."""
    names: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names.append((base, node.level))
            names += [(f"{base}.{alias.name}" if base else alias.name, node.level) for alias in node.names
                      if alias.name != "*"]
    return names


def _local_files(root: Path, importer: Path, name: str, level: int) -> list[Path]:
    """The files under `root` that importing `name` (relative `level` from `importer`) runs: the module and its
    packages' `__init__.py`."""
    base = importer.parent
    for _ in range(max(level - 1, 0)):
        base = base.parent
    start = base if level else root
    parts = [p for p in name.split(".") if p]
    found: list[Path] = []
    folder = start
    for i, part in enumerate(parts):
        module = folder / f"{part}.py"
        package = folder / part / "__init__.py"
        if package.is_file():
            found.append(package)
            folder = folder / part
        elif module.is_file() and i == len(parts) - 1:
            found.append(module)
        elif (folder / part).is_dir() and i < len(parts) - 1:
            folder = folder / part  # a namespace package
        else:
            break
    return [f.resolve() for f in found if f.resolve().is_relative_to(root)]


def third_party_packages(top_level: set[str]) -> dict[str, str]:
    """{distribution: installed version} for the top-level module names that are neither the standard library's
    nor what every JAX environment brings."""
    providers = metadata.packages_distributions()
    found: dict[str, str] = {}
    for name in sorted(top_level):
        if not name or name in sys.stdlib_module_names or name == "__future__":
            continue
        for dist in providers.get(name, []):
            if dist.lower().replace("_", "-") in JAX_OWN or dist.lower() in JAX_OWN:
                continue
            try:
                found[dist.lower()] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    return found
