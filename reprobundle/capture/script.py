"""A pack script, `path/to/script.py[:FACTORY]`: its factory builds the call to pack. Running it is what `pack
SCRIPT.py` asks for; the program a replay retraces is read from the same file by capture/source.py, never run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ReproBundleError, ScriptError
from .source import Program, collect_program

DEFAULT_FACTORY = "make"


def split_script(script: str) -> tuple[Path, str]:
    """`path.py[:FACTORY]` -> (path, factory name; default DEFAULT_FACTORY)."""
    path_text, _, factory_name = script.partition(":")
    return Path(path_text), factory_name or DEFAULT_FACTORY


def load_factory(script: str) -> tuple[Path, str, Callable]:
    """`path/to/script.py[:FACTORY]` -> (path, source text, factory). Runs the script: the user asked for it."""
    path, factory_name = split_script(script)
    if not path.is_file():
        raise ScriptError(f"script {path} does not exist")
    source = path.read_text()
    spec = importlib.util.spec_from_file_location(f"_reprobundle_script_{abs(hash(str(path.absolute())))}", path)
    if spec is None or spec.loader is None:  # no loader for the file's suffix
        raise ScriptError(f"{path} is not a Python script", hint="give a .py file: SCRIPT.py[:FACTORY]")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.absolute()))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ScriptError(f"running {path} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ScriptError(f"{path} has no function {factory_name}()",
                          hint=f"define {factory_name}() returning (fn, args) or (fn, args, kwargs), "
                               f"or name another one with {path}:FACTORY")
    return path, source, factory


def call_factory(script: str) -> tuple[str, Callable, tuple, dict]:
    """Run the script and its factory: (source text, fn, args, kwargs), the factory's result checked."""
    path, source, factory = load_factory(script)
    try:
        made = factory()
    except ReproBundleError:
        raise
    except Exception as e:
        raise ScriptError(f"{path}:{factory.__name__}() failed: {type(e).__name__}: {e}") from e
    if not (isinstance(made, tuple) and len(made) in (2, 3) and callable(made[0])):
        raise ScriptError(f"{path}:{factory.__name__}() must return (fn, args) or (fn, args, kwargs)")
    fn, args, kwargs = (*made, {}) if len(made) == 2 else made
    return source, fn, tuple(args) if isinstance(args, (tuple, list)) else (args,), dict(kwargs)


def script_program(script: str, static: Sequence[Any] = ()) -> Program:
    """The program of `script.py[:FACTORY]` as a bundle stores it for retrace, read without running anything: the
    factory must be bound at the script's top level (a def, an assignment or an import)."""
    import ast

    path, factory_name = split_script(script)
    if not path.is_file():
        raise ScriptError(f"script {path} does not exist", hint="script= names the file whose factory builds the call")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as e:
        raise ScriptError(f"{path} does not parse: {e}") from None
    if factory_name not in _top_level_names(tree):
        raise ScriptError(f"{path} defines no {factory_name}() at its top level",
                          hint=f"a replay with --retrace calls {factory_name}(), which returns (fn, args); "
                               f"or name another one with {path}:FACTORY")
    return collect_program(path, factory_name, static)


def _top_level_names(tree) -> set[str]:
    import ast

    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
