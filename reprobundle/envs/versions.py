"""Version numbers on the host, by PEP 440 (the `packaging` library): the one place that orders and compares JAX
releases and checks a Python version against a Requires-Python specifier.

The worker (worker/stablehlo.py) keeps its own standard-library parsing: it runs in old environments that may not
have `packaging`.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["parse_version", "version_key", "same_release", "is_final_release", "release_name", "python_release",
           "python_allowed", "releases_between"]


def parse_version(text: str) -> Version | None:
    """`text` as a PEP 440 version ("0.8.0", "v0.4.30", "0.5.0rc1"); None when it is not one ("installed")."""
    try:
        return Version(text)
    except (InvalidVersion, TypeError):
        return None


def version_key(text: str) -> tuple:
    """Sort key for version strings: PEP 440 order ("0.8" and "0.8.0" are equal, 0.10 after 0.9); strings that are not
    versions ("installed", "latest") sort first, by name."""
    v = parse_version(text)
    return (1, v) if v is not None else (0, text)


def same_release(a: str, b: str) -> bool:
    """Whether two version strings name the same release ("0.8" and "0.8.0.0" do); False if either is not a version."""
    va, vb = parse_version(a), parse_version(b)
    return va is not None and va == vb


def is_final_release(v: Version) -> bool:
    """A plain release such as 0.4.30 (no epoch, pre-, post-, dev-release or local part)."""
    return v.epoch == 0 and v.pre is None and v.post is None and v.dev is None and v.local is None


def release_name(text: str) -> str:
    """The release numbers without trailing zeros ("0.8.0" -> "0.8"): one spelling per release, for file names."""
    release = list(Version(text).release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return ".".join(map(str, release))


_LEADING_RELEASE = re.compile(r"\d+(?:\.\d+)*")


def python_release(text: str) -> Version:
    """The release part of a Python version string ("3.13.0rc1" -> 3.13.0, "3.14.0a1+" -> 3.14.0), which is what
    installers (pip, uv) check against Requires-Python."""
    v = parse_version(text.strip())
    if v is None:  # a source build's "3.14.0a1+" is not PEP 440
        m = _LEADING_RELEASE.match(text.strip())
        if m is None:
            raise ValueError(f"not a Python version: {text!r}")
        v = Version(m.group(0))
    return Version(".".join(map(str, v.release[:3])))


def python_allowed(spec: str | None, python_version: str) -> bool:
    """Whether the Requires-Python specifier `spec` (">=3.9", ">=3.7,<4", "!=3.0.*", "===3.12.1") admits the Python
    `python_version` ("3.12.1"). An empty spec admits everything; a clause that is not PEP 440 is ignored rather
    than excluding on it."""
    if not spec or not spec.strip():
        return True
    version = python_release(python_version)
    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        pass
    for clause in spec.split(","):
        try:
            if not Specifier(clause.strip()).contains(version, prereleases=True):
                return False
        except InvalidSpecifier:
            continue  # something exotic: do not exclude on it
    return True


_RELEASE_RE = re.compile(r"^(jax\s*==\s*)?[vV]?\d+(\.\d+){0,3}$")
_REQUEST_RE = re.compile(r"^(installed|latest|nightly(:[0-9-]{0,10})?|\d+(\.\d+){0,3}((a|b|rc)\d+|\.dev\d+)?)$")


def check_jax_requests(requests: Sequence[Any], releases: Callable[[], Sequence[str]],
                       options: Sequence[str] | None = None) -> None:
    """Refuse, before anything runs, a JAX request that can never be met: one that is not `installed`, `latest`, a
    release (`0.8.0`, `v0.8.0`, `jax==0.8.0`), a pre-release or nightly (`0.9.0rc1`, `0.9.0.dev20251003`,
    `nightly:2025-10-03`) or a path to an interpreter or environment that exists; a release the package index does
    not have (`releases()`: the installable ones; when the index cannot be read, the environment says so later).
    `options`: the option that gave each request, as the error names it (default --jax; bisect's --good, --bad)."""
    import os

    from ..errors import ReproBundleError, UsageError
    from ..text import quoted

    plain = []
    for i, request in enumerate(requests):
        text = str(getattr(request, "jax", request)).strip()  # a version, or a contender (run/contenders.py)
        if _RELEASE_RE.match(text):
            plain.append((re.sub(r"^(jax\s*==\s*)?[vV]?", "", text), options[i] if options else "--jax"))
        elif not _REQUEST_RE.match(text) and not (os.sep in text and _names_a_python(text)):
            raise UsageError(f"{options[i] if options else '--jax'} {quoted(text, 60)} is not a JAX version"
                             + (": no Python interpreter or environment is there" if os.sep in text else ""),
                             hint="give a release such as 0.8.0, 'installed', 'latest', a nightly such as "
                                  "nightly:2025-10-03, or the path of a Python interpreter or environment")
    if not plain:
        return
    try:
        known = list(releases())
    except ReproBundleError:
        return
    for release, option in plain:
        if release not in known:
            _refuse_release(release, option, known)


def _refuse_release(release: str, option: str, known: list[str]) -> None:
    """The UsageError of a release the index does not name as given, with the nearest it does."""
    from ..errors import UsageError
    from ..text import quoted

    near = nearest_release(release, known)
    if near is not None and same_release(release, near):  # `0.6`: it would run as a version of its own
        raise UsageError(f"{option} {quoted(release, 40)}: did you mean {near}?",
                         hint=f"name the release as the package index does: {option} {near}")
    newest = known[-1] if known else "none"
    raise UsageError(f"jax {quoted(release, 40)} is not a release on the package index"
                     + (f": did you mean {near}?" if near else ""),
                     hint=f"the installable releases run from {known[0] if known else 'none'} to {newest}")


def nearest_release(text: str, known: Sequence[str]) -> str | None:
    """The release of `known` nearest to the version `text`: the same release spelled by the index (`0.6` ->
    0.6.0), else the first that `text` begins with a digit short of (`0.4.3` -> 0.4.30, the likelier slip than
    0.4.13), else the one sharing the most leading numbers with it, the closer of its neighbours in version order
    first; None where `text` is no version or `known` is empty."""
    wanted = parse_version(text)
    found = [(v, k) for k in known if (v := parse_version(k)) is not None]
    if wanted is None or not found:
        return None
    same = [k for v, k in found if v == wanted]
    if same:
        return same[0]
    longer = sorted((v, k) for v, k in found if k.startswith(text) and k[len(text):].isdigit())
    if longer:
        return longer[0][1]

    def shared(v: Version) -> int:
        return next((i for i, (a, b) in enumerate(zip(v.release, wanted.release)) if a != b),
                    min(len(v.release), len(wanted.release)))

    return max(found, key=lambda vk: (shared(vk[0]), -abs(_as_number(vk[0]) - _as_number(wanted))))[1]


def _as_number(v: Version) -> float:
    """A release as one number for distances between neighbours (each part a thousandth of the one before)."""
    return sum(part / 1000.0 ** i for i, part in enumerate(v.release[:4]))


def _names_a_python(text: str) -> bool:
    """Whether a --jax PATH names a Python interpreter (by its name: python3.12, pypy3) or a folder holding one
    (bin/python); its JAX is checked when the environment is resolved (envs/local_jax.py)."""
    from pathlib import Path

    path = Path(text).expanduser()
    if path.is_dir():
        return any((path / sub).is_file() for sub in ("bin/python", "bin/python3", "Scripts/python.exe"))
    return path.is_file() and path.name.startswith(("python", "pypy"))


def releases_between(span: str, available: list[str]) -> list[str]:
    """The final releases of `available` from A to B inclusive, in order, for `span` "A..B"; ValueError when `span`
    is not two versions joined by '..' or A is after B."""
    first, sep, last = span.partition("..")
    low, high = parse_version(first.strip()), parse_version(last.strip())
    if not sep or low is None or high is None or low > high:
        raise ValueError(f"{span!r} is not a range of releases such as 0.7.2..0.9.2")
    found = [(v, text) for text in available if (v := parse_version(text)) is not None and is_final_release(v)]
    return [text for v, text in sorted(found) if low <= v <= high]
