"""`python path/to/reprobundle/worker JOB RESULT`: run this folder as the package `reprobundle_worker`.

Run by path, Python puts this folder first on sys.path, where the worker's own modules (`trace`, `timing`...)
would shadow the standard library's and jax's imports; the folder is taken off sys.path and loaded as a package
of its own, without the host package, which the replay environment does not have.
"""
import importlib.util
import os
import sys

if __package__:  # python -m reprobundle.worker
    from .main import main
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    _SPEC = importlib.util.spec_from_file_location("reprobundle_worker", os.path.join(_HERE, "__init__.py"),
                                                   submodule_search_locations=[_HERE])
    assert _SPEC is not None and _SPEC.loader is not None, "a folder with __init__.py always has a spec"
    _PACKAGE = importlib.util.module_from_spec(_SPEC)
    sys.modules["reprobundle_worker"] = _PACKAGE
    _SPEC.loader.exec_module(_PACKAGE)
    from reprobundle_worker.main import main  # type: ignore[no-redef]

if __name__ == "__main__":
    sys.exit(main())
