"""Whether a change is documented as intended: JAX's release notes (CHANGELOG.md at the release's tag, from a JAX git
repository; for a commit window, which has no bad release, its `## Unreleased` section at the commit) read for the
entries that name the changed option, flag or function, under whatever heading of the notes they sit ("Bug fixes",
"Changes", "Deprecations", ...).

The notes of a release are where a maintainer reads them: its own section (`## jax 0.4.31`, `## JAX 0.7.2 (...)`:
JAX capitalised its headings from 0.6.0), which JAX's tag of the release often does not have yet: at jax-v0.7.2 and
jax-v0.10.0 the release's notes are still the `## Unreleased` section (renamed after the tag), so that section at the
release's own tag is its notes where the tag has no section of the release; a local clone also reads the release's
section as the newest release's tag publishes it.

The repository is one the user names (`issue --jax-repo PATH|URL`: a clone, or a URL cloned shallowly at the tag
into a temporary folder), else the clone `bisect-commits` keeps beside the environments (`jax-repo.git`). Nothing is fetched
otherwise, and any failure (no git, no tag, no such section) says nothing: an entry is quoted only where one names
the change.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from typing import Sequence

from ..envs.jax_commit import JaxRepo, git_dir_of, run_git
from ..errors import ReproBundleError
from ..text import clean

QUOTE_CHARS = 300


def tags_of(release: str) -> list[str]:
    """The git tags a JAX release may have: `jax-v0.5.0` (JAX's own), then `v0.5.0`."""
    return [f"jax-v{release}", f"v{release}"]


UNRELEASED = "Unreleased"  # the section where JAX's CHANGELOG keeps the coming release's notes


def changelog_at(repo: str, release: str, commit: str | None = None) -> str | None:
    """CHANGELOG.md at the release's tag of `repo` (a folder holding a clone, or a URL), or at `commit` (a full
    hash) where given; None where it cannot be read."""
    if "://" not in repo and not repo.startswith("git@"):
        with contextlib.suppress(ReproBundleError):
            clone = JaxRepo(git_dir_of(repo, "--jax-repo", "a clone of JAX"), "")
            return clone.file_at(commit or clone.tag_of(release), "CHANGELOG.md")
        return None
    folder = tempfile.mkdtemp(prefix="reprobundle-jax-notes-")
    try:
        if commit is not None:  # one commit fetched shallowly (GitHub serves a commit by its full hash)
            with contextlib.suppress(ReproBundleError):
                run_git(["init", "--quiet", folder])
                run_git(["-C", folder, "fetch", "--quiet", "--depth", "1", "--", repo, commit])
                return run_git(["-C", folder, "show", "FETCH_HEAD:CHANGELOG.md"])
            return None
        for tag in tags_of(release):
            with contextlib.suppress(ReproBundleError):
                run_git(["clone", "--quiet", "--depth", "1", "--branch", tag, "--no-checkout", "--", repo, folder])
                return run_git(["-C", folder, "show", f"{tag}:CHANGELOG.md"])
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def release_sections(changelog: str, release: str) -> str:
    """The text of the changelog's sections of `release`: `## jax 0.5.0 (...)` and `## jaxlib 0.5.0 (...)`; for
    UNRELEASED, the `## Unreleased` section (the coming release's notes)."""
    heading = re.compile(r"^##\s+Unreleased\b", re.I) if release == UNRELEASED else \
        re.compile(r"^##\s+(jax|jaxlib)\s+v?" + re.escape(release) + r"(\s|\(|$)", re.I)
    out, keep = [], False
    for line in changelog.splitlines():
        if line.startswith("## "):
            keep = bool(heading.match(line))
        elif keep:
            out.append(line)
    return "\n".join(out)


def notes_at_tag(changelog: str, release: str) -> str:
    """The notes of `release` in CHANGELOG.md as its own tag holds it: its sections, or, where the tag has none, the
    `## Unreleased` section (JAX tags a release before it renames that section)."""
    own = release_sections(changelog, release)
    return own if own.strip() else release_sections(changelog, UNRELEASED)


def entries(section: str, limit: int = QUOTE_CHARS) -> list[str]:
    """The section's list items, each one line (continuation lines joined, Markdown roles and links simplified)."""
    items: list[list[str]] = []
    for line in section.splitlines():
        stripped = line.strip()
        if re.match(r"[*-]\s", stripped):
            items.append([stripped[2:].strip()])
        elif stripped and items:
            items[-1].append(stripped)
        elif not stripped and items and items[-1] != [""]:
            items.append([""])  # a blank line ends an item's continuation
    text = [" ".join(parts).strip() for parts in items if parts != [""]]
    return [_plain(t, limit) for t in text if t]


def _plain(text: str, limit: int = QUOTE_CHARS) -> str:
    text = re.sub(r"\{[a-z-]+\}(`[^`]*`)", r"\1", text)  # {func}`jax.numpy.einsum` -> `jax.numpy.einsum`
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # [the update note](https://...) -> the update note
    return clean(text, limit)


ALIASES = {"jax.numpy.": "jnp.", "jax.lax.": "lax."}  # how JAX's notes often spell a function (`jnp.arccos`)


def naming(items: Sequence[str], names: Sequence[str]) -> list[str]:
    """The items that name one of `names` as a whole word (an XLA flag with or without its `--`; a function of
    jax.numpy or jax.lax also by its usual alias: `jnp.arccos`)."""
    wanted = [n.lstrip("-") for n in names if n and len(n.lstrip("-")) >= 3]
    wanted += [alias + n[len(full):] for n in wanted for full, alias in ALIASES.items() if n.startswith(full)]
    found = []
    for item in items:
        if any(re.search(r"(?<![\w.])" + re.escape(n) + r"(?![\w])", item) for n in wanted):
            found.append(item)
    return found


def documented(repo: str | None, release: str, names: Sequence[str], commits: Sequence[str] = ()) -> list[str]:
    """`documented in the 0.5.0 release notes: ...` for each entry of `release`'s notes that names one of `names`;
    with `commits` (full hashes, no release: a commit window), the `## Unreleased` section at the first of them
    whose section names one: `documented in the notes of the coming release (Unreleased, at commit c36456a817):
    ...`. [] where none does, or the notes cannot be read."""
    where = repo or found_repo()
    if not where or not names or not (release or commits):
        return []
    if commits:
        for commit in dict.fromkeys(commits):
            text = changelog_at(where, release, commit)
            found = naming(entries(release_sections(text, UNRELEASED)), names) if text else []
            if found:
                return [f"documented in the notes of the coming release ({UNRELEASED}, at commit {commit[:10]}): "
                        f"{item}" for item in found]
        return []
    text = changelog_at(where, release)
    if text is None:
        return []
    items = entries(notes_at_tag(text, release)) + entries(release_sections(published_changelog(where) or "", release))
    return [f"documented in the {release} release notes: {item}" for item in naming(list(dict.fromkeys(items)), names)]


def local_clone(repo: str | None) -> JaxRepo | None:
    """The JAX repository here: `repo` where it is a folder holding a clone, else the clone `bisect-commits` keeps
    in the cache (found_repo); None where there is none (nothing is cloned)."""
    where = repo if repo and "://" not in repo and not repo.startswith("git@") else found_repo()
    if not where:
        return None
    try:
        return JaxRepo(git_dir_of(where, "--jax-repo", "a clone of JAX"), "")
    except ReproBundleError:
        return None


def release_tags(clone: JaxRepo) -> list[tuple[str, str]]:
    """(release, tag) of the clone's release tags (`jax-vX`), oldest first."""
    from ..envs.versions import version_key

    try:
        tags = clone.git("tag", "--list", "jax-v*").split()
    except ReproBundleError:
        return []
    return sorted(((t[len("jax-v"):], t) for t in tags), key=lambda found: version_key(found[0]))


def published_changelog(repo: str) -> str | None:
    """CHANGELOG.md at the newest release tag of `repo` where it is a local clone (newest_changelog); None for a URL
    or where it cannot be read."""
    clone = local_clone(repo) if "://" not in repo and not repo.startswith("git@") else None
    return newest_changelog(clone) if clone is not None else None


def newest_changelog(clone: JaxRepo) -> str | None:
    """CHANGELOG.md at the clone's newest release tag (`jax-vX`): the notes as JAX publishes them, each release's
    under its own heading."""
    tags = release_tags(clone)
    return clone.file_at(tags[-1][1], "CHANGELOG.md") if tags else None


ENTRY_CHARS = 1200  # a commit's own entry is quoted whole (its workaround often ends it): cut only past this
_ITEM = re.compile(r"^\s*[*-]\s+")
_WAY_BACK = re.compile(r"\b(?:use|set|pass|call|write|recover|restore|keep|get back)\b[^.]*`[^`]+`|"
                       r"\b(?:to recover|to restore|to keep|to get) the (?:previous|old|former)\b", re.I)


def added_entries(repo: JaxRepo, sha: str) -> list[str]:
    """The CHANGELOG.md entries the commit itself adds (its diff against its first parent: the list items among
    the lines it adds, each item's added continuation lines joined), each one line and whole; [] where it adds
    none or the diff cannot be read."""
    try:
        diff = repo.git("diff", "--unified=0", f"{sha}^1", sha, "--", "CHANGELOG.md")
    except ReproBundleError:
        return []
    added = []
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++") and not line[1:].lstrip().startswith("#"):
            added.append(line[1:])
        elif line.startswith("@@") or line.startswith("+"):
            added.append("")  # a hunk or a heading ends the item before it
    return [e for e in entries("\n".join(added), ENTRY_CHARS) if len(e) > 3 and not e.endswith(":")]


def heading_of(changelog: str, entry: str) -> str | None:
    """The `## ` heading under which `entry` (as added_entries gives it) sits in a changelog, whatever release it
    names (JAX's bf16 `jnp.arange` entry sits under `JAX 0.9.2` at the jax-v0.10.0 tag, the release it shipped
    in); None where it is not there."""
    heading, item = None, ""
    for line in [*changelog.splitlines(), "## end"]:
        if item and (line.startswith("#") or _ITEM.match(line) or not line.strip()):
            if _plain(item, ENTRY_CHARS) == entry:
                return clean(heading, 200) if heading else None
            item = ""
        if line.startswith("## "):
            heading = line[3:].strip()
        elif _ITEM.match(line):
            item = _ITEM.sub("", line).strip()
        elif line.strip() and item:
            item += " " + line.strip()
    return None


def workaround_of(entry: str) -> str | None:
    """The sentence of an entry that gives the way back to the old behaviour ("To recover the previous behavior
    in this case, use `jnp.array(np.arange(...))`."), or None."""
    for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z])", entry):
        if _WAY_BACK.search(sentence):
            return sentence.strip()
    return None


def commit_notes(repo: JaxRepo, sha: str, release: str | None, at: str | None = None) -> dict | None:
    """What the first bad commit `sha` documents: the entry it adds to CHANGELOG.md (the first, where it adds
    several, naming a function: the first that gives a workaround), its workaround, and where the notes carry it:
    CHANGELOG.md at `release`'s tag (the release the change shipped in), or, with no release (a commit window),
    at the commit `at`, under whatever heading it sits there (where the release's tag still holds it under
    `## Unreleased`, the heading the newest release's tag gives it). {"entry", "workaround", "release", "at",
    "heading", "commit"}; None where the commit adds no entry."""
    found = added_entries(repo, sha)
    if not found:
        return None
    entry = next((e for e in found if workaround_of(e)), found[0])
    text = None
    with contextlib.suppress(ReproBundleError):
        text = repo.file_at(repo.tag_of(release) if release else (at or sha), "CHANGELOG.md")
    heading = heading_of(text, entry) if text else None
    if release and (heading is None or heading.lower().startswith(UNRELEASED.lower())):  # the tag's not yet renamed
        published = newest_changelog(repo)
        heading = (heading_of(published, entry) if published else None) or heading
    return {"entry": entry, "workaround": workaround_of(entry), "release": release, "commit": sha,
            "at": None if release else (at or sha), "heading": heading}


def found_repo() -> str | None:
    """The JAX clone `bisect-commits` keeps beside the environments (envs/jax_commit.open_repo), or None."""
    from ..envs.env_folders import default_root
    from ..envs.jax_commit import CACHED_REPO

    folder = default_root() / CACHED_REPO
    return str(folder) if (folder / "HEAD").is_file() else None


# Names on nearly every changed line, whose mention in release notes says nothing about this change.
UBIQUITOUS = {"jax.jit", "jax.vmap", "jax.grad", "jax.value_and_grad", "jax.pmap", "jax.numpy.array",
              "jax.numpy.asarray", "jax.block_until_ready"}
_CHANGED_AT = re.compile(r"\bat ([\w./-]+\.py):(\d+)")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def imported_as(text: str) -> dict[str, str]:
    """What each name a file binds by import stands for: `jnp` -> `jax.numpy`, `gamma` ->
    `jax.scipy.special.gamma` (absolute imports; nothing where the file does not parse)."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def called_names(files: dict[str, str], lowering_text: str) -> list[str]:
    """The functions the program calls on the source lines whose lowering changed (`+2 convert at rng.py:8`), by
    their full names through the file's imports (`jax.scipy.special.gamma`), the ubiquitous transforms left out."""
    by_name = {path.rsplit("/", 1)[-1]: text for path, text in files.items()}
    found: list[str] = []
    for fname, number in dict.fromkeys(_CHANGED_AT.findall(lowering_text)):
        text = by_name.get(fname)
        lines = text.splitlines() if text else []
        if not 0 < int(number) <= len(lines):
            continue
        imports = imported_as(text or "")
        for name in _DOTTED.findall(lines[int(number) - 1]):
            first, _, rest = name.partition(".")
            full = imports[first] + ("." + rest if rest else "") if first in imports else None
            if full and "." in full and full not in UBIQUITOUS and full not in found:
                found.append(full)
    return found
