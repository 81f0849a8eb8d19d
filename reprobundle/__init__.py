"""reprobundle: capture a JAX computation once, replay it on any JAX version, and say what changed."""

__version__ = "0.1.0"

from . import capture  # noqa: E402  (the package; called, it is the capture context manager)

# The API names load on first use (PEP 562): a program run under `reprobundle capture` imports this package to
# load the hook, and must not pay for the store, registry and replay layers it never uses.
_LAZY = {"open_registry": "api", "pack": "api", "pack_exported": "api", "pack_script": "api", "replay": "api",
         "BundleRef": "bundle.registry", "ReproBundleError": "errors"}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f".{name}", __name__)  # a submodule, as `reprobundle.api`
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["BundleRef", "ReproBundleError", "capture", "open_registry", "pack", "pack_exported", "pack_script", "replay",
           "__version__"]
