"""The package's folders are layers: no import runs back up a layer, no module imports itself in a circle, and no
private name crosses modules. docs/architecture.md draws the same picture."""

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "reprobundle"

# Lowest first. A module may import its own layer's modules and those of lower layers; `worker` imports nothing of
# the host (it runs in other environments), and nothing imports `cli`.
LAYERS = [
    {"errors", "text", "config", "units", "logs"},
    {"store"},
    {"bundle"},
    {"analysis"},
    {"envs"},  # environment provisioning: releases, nightlies, local builds, interpreters, platforms
    {"run"},  # measurement: workers, the interleaved schedule, budgets, replays
    {"capture"},
    {"fleet"},  # distribution: executors, Ray, a sweep's tasks and resume
    {"investigate"},  # bisect, nightly bisect, explain, isolate
    {"render"},
    {"api"},
    {"cli"},
    {"__main__"},  # `python -m reprobundle`: starts the CLI
]


def _layer_of(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, names in enumerate(LAYERS) if top in names)


@functools.cache
def _imports() -> dict[str, set[str]]:
    """module (dotted, below reprobundle) -> the reprobundle modules it imports (dotted)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        module = ".".join(parts) or "__init__"
        package = parts if is_package else parts[:-1]
        targets = found.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                stem = base + (node.module.split(".") if node.module else [])
                if node.module is None:  # from . import a, b: each name may be a module
                    targets.update(".".join(stem + [a.name]) for a in node.names)
                else:
                    targets.add(".".join(stem))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                targets.update(n.split(".", 1)[1] for n in names if n.startswith("reprobundle."))
    return found


def test_no_import_runs_up_a_layer():
    problems = []
    for module, targets in _imports().items():
        if module == "__init__":
            continue
        for target in targets:
            top = target.split(".")[0]
            if module.startswith("worker") and top != "worker":
                problems.append(f"worker module {module} imports the host's {target}")
            elif not module.startswith("worker") and top != "worker" and top != "__version__" and \
                    _layer_of(target) > _layer_of(module):
                problems.append(f"{module} imports {target}, a higher layer")
    assert not problems, "\n".join(sorted(problems))


def test_no_import_cycles_between_modules():
    modules = _imports()

    def module_of(target: str) -> str:  # `from . import name` where name is no module imports the package
        return target if target in modules else target.rpartition(".")[0]

    graph = {m: {module_of(t) for t in ts if module_of(t) in modules and module_of(t) != m} for m, ts in modules.items()}
    graph = {m: ts for m, ts in graph.items() if m != "__init__"}
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_no_private_name_crosses_modules():
    problems = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("reprobundle")):
                problems += [f"{path.relative_to(PKG)} imports {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and a.name != "__version__"]
    assert not problems, "\n".join(problems)
