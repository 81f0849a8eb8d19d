"""The folders reprobundle walks, writes and deletes in are the real folders inside their root, or refused.

A store folder may come from someone else (an unpacked archive, a shared drive): its `.tmp` or `blobs/sha256/ab`
may be a symbolic link to the user's home, where gc would delete "stale temp files" and a writer would leave its
files. So before walking, writing or deleting in a folder under a root (a store's, the cache's), `inside` checks
that its real path is exactly the root's real path followed by the folder's own relative path (no component is a
link, whatever it points to) and that nothing but a folder is there. A folder that does not exist yet passes: it
is created by the caller as a real folder (`make_inside` creates and checks).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import StoreFolderError


def _refuse(folder: Path, why: str) -> StoreFolderError:
    return StoreFolderError(f"{folder} is {why}; reprobundle walks, writes and deletes only in the real folders "
                            "inside a store or cache", hint=f"remove {folder} (it was not made by reprobundle); "
                                                            "it is recreated as a plain folder when needed")


def inside(root: str | Path, folder: str | Path) -> Path:
    """`folder` (absolute, or relative to `root`) if every part of it below `root` that exists is a real folder
    (not a symbolic link, not a file); else StoreFolderError naming it."""
    root = Path(root)
    path = Path(folder) if Path(folder).is_absolute() else root / folder
    rel = os.path.relpath(path, root)
    if rel == ".":
        return path
    if rel.startswith(".." + os.sep) or rel == "..":
        raise _refuse(path, f"outside {root}")
    current = root
    for part in Path(rel).parts:
        current = current / part
        try:
            st = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return path  # not made yet: its caller creates real folders from here down
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(current, f"a symbolic link (to {os.readlink(current)})")
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(current, "not a folder")
    real_root = os.path.realpath(root)
    if os.path.realpath(path) != os.path.join(real_root, rel):  # a mount trick or a race; never follow it
        raise _refuse(path, f"not inside {real_root}")
    return path


def make_inside(root: str | Path, folder: str | Path) -> Path:
    """`inside(root, folder)`, created (with its parents) as real folders, and checked again once made."""
    path = inside(root, folder)
    path.mkdir(parents=True, exist_ok=True)
    return inside(root, path)
