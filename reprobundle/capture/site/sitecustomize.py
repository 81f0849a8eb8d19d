"""Loaded by Python at startup in a program run under `reprobundle capture` (this folder comes first on its
PYTHONPATH; the program itself is not edited).

It uses the standard library only and does nothing visible: it waits for the program's own `import jax`, then
installs the capture hook (reprobundle.capture.hook), and at exit stages what is pending and writes this
process's report. Whatever goes wrong in here is written to the report, never raised into the program. Then it
hands over to the sitecustomize this one shadows, if the environment has one, and leaves sys.path as it found it.
"""

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys

_FOLDER = os.path.dirname(os.path.abspath(__file__))
_CONFIG = os.environ.get("REPROBUNDLE_CAPTURE")
_STATE: dict = {"started": False, "error": None}


def _report_dir():
    try:
        return json.loads(_CONFIG or "")["dir"]
    except Exception:
        return None


def _write_own_report(extra):
    """The report of a process where the hook did not start (jax never imported, or the hook failed to load)."""
    folder = _report_dir()
    if not folder:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        pid = os.getpid()
        path = os.path.join(folder, "proc-%d.json" % pid)
        tmp = path + ".tmp"
        data = {"format": 1, "pid": pid, "python": sys.executable, "jax": None, "argv": list(sys.argv),
                "rows": [], "finished": True, "problems": []}
        data.update(extra)
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except Exception:
        pass


def _import_hook():
    try:
        from reprobundle.capture import hook
        return hook
    except ImportError:
        root = os.environ.get("REPROBUNDLE_CAPTURE_ROOT")
        if not root:
            raise
    # This interpreter lacks reprobundle: borrow the launcher's copy, last on the path so that every other
    # module still comes from the program's own environment, and only while importing it.
    for name in [m for m in sys.modules if m == "reprobundle" or m.startswith("reprobundle.")]:
        del sys.modules[name]
    sys.path.append(root)
    try:
        from reprobundle.capture import hook
        return hook
    finally:
        if root in sys.path:
            sys.path.remove(root)


def _on_jax_imported():
    try:
        hook = _import_hook()
        hook.start_child(_CONFIG)
        _STATE["started"] = True
    except BaseException as e:  # noqa: BLE001 - the program must run on whatever happens here
        _STATE["error"] = "the capture hook did not start in %s: %s: %s" % (sys.executable, type(e).__name__, e)


class _Loader(importlib.abc.Loader):
    """jax's own loader, then the hook."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        _on_jax_imported()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _JaxWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the program's first `import jax` it wraps the real spec's loader, once."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jax":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def _at_exit():
    if _STATE["started"]:
        try:
            from reprobundle.capture import hook

            hook.finish_child()
        except BaseException as e:  # noqa: BLE001
            _write_own_report({"error": "the capture hook failed at exit: %s: %s" % (type(e).__name__, e)})
        return
    _write_own_report({"error": _STATE["error"]} if _STATE["error"] else {})


def _chain():
    """Import the sitecustomize this one shadows (the next on sys.path), as Python would have."""
    me = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _FOLDER]
    try:
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            raise
        if me is not None:
            sys.modules["sitecustomize"] = me


if _CONFIG:
    if "jax" in sys.modules:
        _on_jax_imported()
    else:
        sys.meta_path.insert(0, _JaxWatcher())
    atexit.register(_at_exit)
_chain()
