"""The package's folders are layers: no import runs back up a layer, no module imports itself in a circle, and no
private name crosses modules. docs/architecture.md draws the same picture."""

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "reprobundle"
INVESTIGATION_BASE = {"investigate", "investigate.case", "investigate.answers", "investigate.release_notes"}

# Lowest first. A module may import its own layer's modules and those of lower layers; `worker` imports nothing of
# the host (it runs in other environments), and nothing imports `cli`. A layer is named by the dotted prefix of its
# modules; the longest prefix that matches decides (investigate/'s rooms are layers of their own).
LAYERS = [
    {"errors", "text", "config", "units", "logs"},
    {"store"},
    {"bundle"},
    {"analysis"},
    {"envs"},  # environment provisioning: releases, nightlies, local builds, interpreters, platforms
    {"run"},  # measurement: workers, the interleaved schedule, budgets, replays
    {"capture"},
    {"fleet"},  # distribution: executors, Ray, a sweep's tasks and resume
    # the investigation: what its rooms share (the case, the stored answers, the release notes), then the rooms by
    # job, each importing only those below it, then the chain over all of them
    INVESTIGATION_BASE,
    {"investigate.search"},  # the searches over builds: releases, nightlies, commits, the windows of changes
    {"investigate.minimize"},  # minimize and isolate: a function's ops cut into modules of their own
    {"investigate.explain"},  # explain and its experiments: what restores the last good release
    {"investigate.report"},  # the issue body, the table of changes, the reproducers, the newest release
    {"investigate.chain"},  # `investigate`: the steps above, one after another
    {"render"},
    {"api"},
    {"cli"},
    {"__main__"},  # `python -m reprobundle`: starts the CLI
]


def _layer_of(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = [i for i, names in enumerate(LAYERS) if ".".join(parts[:n]) in names]
        if found:
            return found[0]
    raise AssertionError(f"{module} is in no layer")


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


def test_every_module_of_the_investigation_lies_in_a_room():
    """A new module of investigate/ goes into the room of its job (or, shared by the rooms, is named here)."""
    rooms = {next(iter(names)) for names in LAYERS if next(iter(names)).startswith("investigate.")}
    loose = [m for m in _imports() if m.startswith("investigate.") and m not in INVESTIGATION_BASE
             and not any(m == r or m.startswith(r + ".") for r in rooms)]
    assert not loose, loose


def test_no_room_imports_the_chain():
    """The rooms are below the chain: none of them imports investigate/chain.py, which calls each."""
    found = [m for m, targets in _imports().items() if m.startswith("investigate.") and m != "investigate.chain"
             and any(t == "investigate.chain" or t.startswith("investigate.chain.") for t in targets)]
    assert not found, found


# Two modules may share a file name only under a convention docs/architecture.md ("Names") states: render/NAME.py
# draws what NAME below computes (or the command of that name answers), cli/sharing.py holds bundle/sharing.py's
# commands, worker/NAME.py is the worker's side of the host's NAME, and __main__.py is Python's.
RENDER_MIRRORS = {"bundle_pair.py", "comparison.py", "history.py", "spent.py", "sweep.py", "commits.py", "sharing.py"}
WORKER_SIDES = {"flatten.py", "release_facts.py", "retrace.py", "__main__.py"}


def test_a_shared_file_name_follows_a_stated_convention():
    folders: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        if path.name != "__init__.py" and "compiled_schemas" not in path.parts:
            folders.setdefault(path.name, []).append(path.parent.relative_to(PKG).as_posix())
    problems = []
    for name, where in sorted(folders.items()):
        if len(where) == 1:
            continue
        if name in RENDER_MIRRORS and "render" in where and len(set(where) - {"render", "cli"}) == 1:
            continue
        if name in WORKER_SIDES and "worker" in where and len(where) == 2:
            continue
        problems.append(f"{name} in {', '.join(where)}")
    assert not problems, "rename one of them, or state the convention in docs/architecture.md:\n" + "\n".join(problems)
