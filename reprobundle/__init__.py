"""reprobundle: capture a JAX computation once, replay it on any JAX version, and say what changed."""

__version__ = "0.1.0"

from .api import open_registry, pack, pack_exported, replay  # noqa: E402
from .bundle.registry import BundleRef  # noqa: E402
from .errors import ReproBundleError  # noqa: E402

__all__ = ["BundleRef", "ReproBundleError", "open_registry", "pack", "pack_exported", "replay", "__version__"]
