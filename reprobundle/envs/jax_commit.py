"""JAX's Python at a commit, run over an already-released jaxlib: the build kind of a commit bisection.

JAX is pure Python over jaxlib, and every commit imports over the jaxlib releases its `jax/version.py` allows:
no older than its `_minimum_jaxlib_version` and no newer than its own `_version` (the check JAX makes at import,
both ways: after jax-v0.4.33 the commits read 0.4.32 and refuse jaxlib 0.4.33). So JAX at a commit needs no build:
its `jax/` folder, taken from a git repository (`git archive`), is put in front of the cached environment of a
released jaxlib it accepts (ReleasesOver chooses which).

That is a small virtual environment of its own, in a folder of the bisection's own under the environment root
(removed when the bisection ends), or kept where `envs --add-commit` makes one for `--jax PATH` (listed and removed
by `envs` like a release's)::

    <env root>/jax-commits/run-XXXX/<sha12>-over-jax-0.7.1-py3.11/     a bisection's
    <env root>/jax-commits/kept/<sha12>-over-jax-0.10.2-tpu-py3.12/     envs --add-commit's
        pyvenv.cfg, bin/python        the cached environment's interpreter (a symlink), isolated as any venv
        lib/python3.11/site-packages/
            jax/                      the commit's JAX, from `git archive` (version.py stamped as a wheel's)
            jax-<V>.dist-info/        its metadata: version `<_version>.dev0+<sha12>` (what a run records)
            _reprobundle_over.pth     the cached release environment's site-packages, after the commit's own
        reprobundle-commit.json       the commit, the jaxlib and the environment it runs over, when it was made

It is built in a temporary folder and renamed into place (never seen half made), and used by its path, as `--jax
PATH` uses any environment (envs/local_jax.py; `described` tells it what the environment holds without starting its
interpreter), so a replay and its run records need nothing new. Nothing is installed into the cached release
environment. Each is ~20 MB of JAX sources made in a fraction of a second: made again by each bisection rather than
kept; a kept one is what a user replays by hand (`replay NAME --jax installed --jax PATH`), such as a later commit's
JAX over the one jaxlib an air-gapped machine has.

The git side is plain `git` on a repository given by path (a clone, a bare mirror), or one cloned once into the cache
from a URL (`--jax-repo URL`: partial, `--filter=blob:none`, so blobs are fetched only for the commits probed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..errors import EnvironmentCreationError, ReproBundleError, UsageError
from .env_folders import JaxEnvironment, dir_size, discard, file_lock, read_env, rmtree
from .nightly import JAX_REPO
from .versions import version_key

__all__ = ["JaxRepo", "Commit", "open_repo", "commit_environment", "ReleasesOver", "jaxlib_accepted", "pull_request",
           "git_in", "git_dir_of", "kept_environment", "kept_environments", "remove_kept", "refuse_older_jaxlib"]

COMMITS_DIR = "jax-commits"
KEPT_DIR = "kept"  # envs --add-commit's environments, under COMMITS_DIR: never swept (a bisection's are run-*)
METADATA = "reprobundle-commit.json"
GIT_TIMEOUT_S = 600.0
_MINIMUM = re.compile(r"""^_minimum_jaxlib_version\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.M)
_VERSION = re.compile(r"""^_version\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.M)
_PULL = (re.compile(r"Merge pull request #(\d+)"), re.compile(r"github\.com/[\w.-]+/[\w.-]+/pull/(\d+)"),
         re.compile(r"\(#(\d+)\)\s*$", re.M))
_GITHUB = re.compile(r"^(?:https://github\.com/|git@github\.com:|ssh://git@github\.com/)([\w.-]+/[\w.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Commit:
    sha: str
    title: str
    date: str  # the author date, ISO 8601
    author: str  # "Name <email>"

    @property
    def short(self) -> str:
        return self.sha[:10]


def pull_request(message: str) -> int | None:
    """The GitHub pull request a commit message names: "Merge pull request #N", the COPYBARA_INTEGRATE_REVIEW
    line's .../pull/N, or a title ending in "(#N)"; None when it names none (a change made inside Google)."""
    for pattern in _PULL:
        m = pattern.search(message)
        if m:
            return int(m[1])
    return None


def commit_headline(record: dict) -> str:
    """`a7b01146f2 jax.random.randint: enable safer_randint by default (#31234)`, as show, issue and the answer say
    a commit (its pull request unless the title names it)."""
    pr = f" (#{record['pr']})" if record.get("pr") and f"#{record['pr']}" not in record["title"] else ""
    return f"{str(record['sha'])[:10]} {record['title']}{pr}"


class JaxRepo:
    """A git repository of JAX, read with `git --git-dir`: its tags, first-parent history, files at a commit."""

    def __init__(self, git_dir: Path, web_url: str, origin: str | None = None) -> None:
        self.git_dir, self.web_url = git_dir, web_url
        self.origin = origin  # the URL a cached clone was made from (resolve fetches a commit-ish from it)

    def git(self, *args: str) -> str:
        return run_git(["--git-dir", str(self.git_dir), *args])

    def tag_of(self, version: str) -> str:
        """The tag of a release: jax-v0.7.2 (since 0.4.x), else v0.7.2. UsageError when the repository has neither."""
        for tag in (f"jax-v{version}", f"v{version}"):
            with contextlib.suppress(EnvironmentCreationError):
                self.git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
                return tag
        raise UsageError(f"the JAX repository {self.git_dir} has no tag of jax {version} (jax-v{version})",
                         hint="fetch its tags (git fetch --tags), or name another clone with --jax-repo")

    def resolve(self, commitish: str) -> str | None:
        """The full hash of a commit-ish (a hash or a unique prefix, a branch, a tag), or None when the repository
        has no such commit. A cached clone fetches it from its origin first (a prefix cannot be fetched: it is
        looked up in what the clone has)."""
        if commitish.startswith("-"):  # never an option to git
            return None
        if self.origin is not None:  # a cached clone: the branch or commit as its origin has it now
            with contextlib.suppress(EnvironmentCreationError):
                self.git("fetch", "--quiet", "--", self.origin, commitish)
                return self.git("rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}").strip()
        try:
            return self.git("rev-parse", "--verify", "--quiet", f"{commitish}^{{commit}}").strip()
        except EnvironmentCreationError:
            return None

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether `older` is an ancestor of `newer` (or the same commit)."""
        try:
            self.git("merge-base", "--is-ancestor", older, newer)
            return True
        except EnvironmentCreationError:
            return False

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two commits (where a release branch left the main line), or None."""
        try:
            return self.git("merge-base", a, b).strip() or None
        except EnvironmentCreationError:
            return None

    def commits_between(self, good_tag: str, bad_tag: str) -> list[Commit]:
        """The commits on the first-parent line from `good_tag` (excluded) to `bad_tag` (included), oldest first:
        the states the main branch was in, one after another, as `git bisect --first-parent` walks them."""
        out = self.git("log", "--first-parent", "--reverse", "--format=%H%x1f%s%x1f%aI%x1f%an <%ae>%x1e",
                       f"{good_tag}..{bad_tag}")
        commits = []
        for record in out.split("\x1e"):
            fields = record.strip("\n").split("\x1f")
            if len(fields) == 4:
                commits.append(Commit(*fields))
        return commits

    def sha_of(self, commitish: str) -> str:
        """The full hash of a commit-ish (resolve's), or UsageError saying the repository has no such commit."""
        sha = self.resolve(commitish)
        if sha is None:
            raise UsageError(f"the JAX repository {self.git_dir} has no commit {commitish!r}",
                             hint="name a commit of it (a hash or a prefix, a branch, a tag), fetch it there "
                                  "(git fetch), or name another clone with --jax-repo")
        return sha

    def message(self, sha: str) -> str:
        return self.git("log", "-1", "--format=%B", sha)

    def parent(self, sha: str) -> str:
        return self.git("rev-parse", f"{sha}^1").strip()

    def file_at(self, sha: str, path: str) -> str | None:
        try:
            return self.git("show", f"{sha}:{path}")
        except EnvironmentCreationError:
            return None

    def versions_at(self, sha: str) -> tuple[str, str | None]:
        """(JAX's `_version`, its `_minimum_jaxlib_version`) at `sha`, read from jax/version.py."""
        text = self.file_at(sha, "jax/version.py") or ""
        version, minimum = _VERSION.search(text), _MINIMUM.search(text)
        if version is None:
            raise EnvironmentCreationError(f"jax/version.py at {sha[:10]} names no _version")
        return version[1], minimum[1] if minimum else None

    def commit_url(self, sha: str) -> str:
        return f"{self.web_url}/commit/{sha}"

    def export_jax(self, sha: str, into: Path) -> None:
        """The commit's `jax/` folder written under `into` (git archive, read as a tar stream; no path leaves it)."""
        with tempfile.TemporaryFile() as stderr:  # a file: a pipe read only at the end could fill and block git
            proc = subprocess.Popen(["git", "--git-dir", str(self.git_dir), "archive", "--format=tar", sha, "jax"],
                                    stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL)
            assert proc.stdout is not None
            try:
                with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                    for member in tar:
                        if member.isfile() or member.isdir():  # git archive writes only these; no link is followed
                            tar.extract(member, into, filter="data")
                code = proc.wait(timeout=GIT_TIMEOUT_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    code = proc.wait()
            stderr.seek(0)
            err = stderr.read().decode("utf-8", "replace")
        if code != 0:
            raise EnvironmentCreationError(f"git archive {sha[:10]} jax failed: {err.strip()[-300:]}")


CACHED_REPO = "jax-repo.git"  # a URL's partial clone, under the environments' root


def run_git(args: list[str]) -> str:
    """`git ARGS` (an argument list, no shell), bounded in time; its stdout, else EnvironmentCreationError."""
    try:
        r = subprocess.run(["git", *args], capture_output=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentCreationError(f"git {' '.join(args[:3])} could not run: {e}",
                                       hint="install git to bisect JAX's commits") from None
    if r.returncode != 0:
        raise EnvironmentCreationError(f"git {' '.join(args[2:5])} failed: "
                                       f"{r.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return r.stdout.decode("utf-8", "replace")


def git_dir_of(path: str, option: str, what: str) -> Path:
    """The git directory of a clone (its .git) or of a bare repository at `path`; UsageError when it is neither."""
    folder = Path(path).expanduser()
    git_dir = folder / ".git" if (folder / ".git").exists() else folder
    if not (git_dir / "HEAD").exists():
        raise UsageError(f"{option} {path}: not a git repository", hint=f"name {what}")
    return git_dir.absolute()


def git_in(path: str, *args: str) -> str:
    """`git ARGS` in the repository at `path` (a clone or a bare one: --xla-repo)."""
    return run_git(["--git-dir", str(git_dir_of(path, "--xla-repo", "a clone of https://github.com/openxla/xla")),
                 *args])


def _web_url(git_dir: Path, given: str | None) -> str:
    """The GitHub page of the repository: the URL given, else its origin's when that is on GitHub, else JAX's."""
    origin = given
    if origin is None:
        with contextlib.suppress(EnvironmentCreationError):
            origin = run_git(["--git-dir", str(git_dir), "config", "--get", "remote.origin.url"]).strip()
    m = _GITHUB.match(origin or "")
    return f"https://github.com/{m[1]}" if m else JAX_REPO


def open_repo(request: str | None, cache_root: Path, progress=None) -> JaxRepo:
    """The JAX repository `--jax-repo` names: a local clone or bare repository (PATH), or a URL cloned once into
    `cache_root` (partial: `--filter=blob:none`, every commit and tag, blobs fetched as probes need them; fetched
    again for tags it lacks). None: JAX's public repository, so cloned."""
    say = progress or (lambda _line: None)
    if request and not re.match(r"^[a-z+]+://|^git@", request):
        git_dir = git_dir_of(request, "--jax-repo", "a clone of https://github.com/jax-ml/jax, or its URL")
        return JaxRepo(git_dir, _web_url(git_dir, None))
    url = request or JAX_REPO + ".git"
    git_dir = cache_root / CACHED_REPO
    with file_lock(cache_root / ".locks" / "jax-repo.lock"):
        if not (git_dir / "HEAD").exists():
            say(f"cloning {url} into {git_dir} (once; partial: blobs are fetched as the probes need them) ...")
            tmp = cache_root / f".tmp-jax-repo-{secrets.token_hex(4)}"
            try:
                run_git(["clone", "--bare", "--filter=blob:none", "--", url, str(tmp)])
                os.rename(tmp, git_dir)
            except EnvironmentCreationError as e:
                rmtree(tmp)
                raise EnvironmentCreationError(f"the JAX repository {url} could not be cloned: {e.message}",
                                               hint="name a local clone with --jax-repo PATH") from None
        else:
            with contextlib.suppress(EnvironmentCreationError):
                run_git(["--git-dir", str(git_dir), "fetch", "--quiet", "--tags", url])
    return JaxRepo(git_dir, _web_url(git_dir, url), origin=url)


_NUMERIC = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def import_key(version: str) -> tuple[int, ...]:
    """A version as JAX's check at import reads it (jax/_src/lib/__init__.py, check_jaxlib_version): its dotted
    numeric prefix, so `0.4.32.dev0+4839b003af` is (0, 4, 32) and jaxlib 0.4.32 is no newer than it."""
    m = _NUMERIC.match(version.strip())
    return tuple(int(x) for x in m[0].split(".")) if m else ()


def jaxlib_accepted(jax_version: str, minimum: str | None, jaxlib: str) -> bool:
    """Whether JAX reading `jax_version` (jax/version.py's `_version`) and needing `minimum` imports over
    `jaxlib`: the check JAX makes at import, both ways: jaxlib no older than `_minimum_jaxlib_version`
    ("jaxlib is version X, but this version of jax requires version >= Y") and no newer than JAX's own version
    ("jaxlib version X is newer than and incompatible with jax version Y")."""
    have = import_key(jaxlib)
    return (minimum is None or have >= import_key(minimum)) and have <= import_key(jax_version)


def accepted_range(jax_version: str, minimum: str | None) -> str:
    """`jaxlib 0.4.31 to 0.4.32`: the jaxlib releases JAX reading `jax_version` imports over."""
    newest = ".".join(map(str, import_key(jax_version)))
    return f"jaxlib {minimum} to {newest}" if minimum else f"jaxlib {newest} or older"


def _jaxlib_of(env: JaxEnvironment) -> str:
    return env.jaxlib_version or env.jax_version


@dataclass
class ReleasesOver:
    """Which released environment each commit runs over: one whose jaxlib the commit accepts both ways
    (jaxlib_accepted), by preference the good release's (the compiler then stays the good release's), then the bad
    release's; else the newest other installable release whose jaxlib it accepts (a window that starts at a patch
    release: after jax-v0.4.33 the commits read 0.4.32 and refuse jaxlib 0.4.33, so they run over 0.4.31's, 0.4.32
    being yanked), made by `ensure`. One choice per (version, minimum): every commit of a stretch runs over the same.

    `releases`: the installable releases (EnvironmentManager.available_versions), asked only when neither end
    fits; `left_out`: those the index lists but cannot install, with why (left_out_versions), named where none fits;
    `newest`: no release newer than this one is taken (a commit window runs over the good release's jaxlib or an
    older one, never a newer: its layer is JAX's lowering)."""

    preferred: Sequence[JaxEnvironment]
    releases: Callable[[], Sequence[str]]
    ensure: Callable[[str], JaxEnvironment]
    left_out: Callable[[], Mapping[str, str]] = dict
    newest: str | None = None
    chosen: dict[tuple[str, str | None], tuple[JaxEnvironment | None, str]] = field(default_factory=dict)

    def over(self, jax_version: str, minimum: str | None) -> tuple[JaxEnvironment | None, str]:
        """(the environment JAX reading `jax_version`, needing `minimum`, runs over, ""), or (None, why none fits,
        whole, with the way out)."""
        key = (jax_version, minimum)
        if key not in self.chosen:
            self.chosen[key] = self._choose(jax_version, minimum)
        return self.chosen[key]

    def over_first(self, jax_version: str, minimum: str | None) -> bool:
        """Whether JAX reading `jax_version`, needing `minimum`, runs over the first preferred environment (a
        window's good release's): the compiler under it is then that release's. Asked without making anything."""
        return bool(self.preferred) and jaxlib_accepted(jax_version, minimum, _jaxlib_of(self.preferred[0]))

    def _choose(self, jax_version: str, minimum: str | None) -> tuple[JaxEnvironment | None, str]:
        for env in self.preferred:
            if jaxlib_accepted(jax_version, minimum, _jaxlib_of(env)):
                return env, ""
        tried = {e.jax_version for e in self.preferred}
        failed = []
        for release in self._candidates(jax_version, minimum, tried)[:2]:
            try:
                env = self.ensure(release)
            except ReproBundleError as e:  # that release cannot be made here: the next one, else said
                failed.append(f"jax {release}'s could not be made: {e.message}")
                continue
            if jaxlib_accepted(jax_version, minimum, _jaxlib_of(env)):
                return env, ""
        return None, self._none_fits(jax_version, minimum, failed)

    def _candidates(self, jax_version: str, minimum: str | None, tried: set[str]) -> list[str]:
        """The installable releases whose own version lies in the accepted range (a release's jaxlib is never newer
        than it), newest first: the closest to the commit."""
        try:
            releases = self.releases()
        except ReproBundleError:  # the index unreachable: said by _none_fits as no release found
            return []
        top = import_key(self.newest) if self.newest else None
        fits = [r for r in releases if r not in tried and jaxlib_accepted(jax_version, minimum, r)
                and (top is None or import_key(r) <= top)]
        return sorted(fits, key=version_key, reverse=True)

    def _none_fits(self, jax_version: str, minimum: str | None, failed: Sequence[str] = ()) -> str:
        span = accepted_range(jax_version, minimum)
        ends = ", ".join(f"jax {e.jax_version}'s has jaxlib {_jaxlib_of(e)}" for e in self.preferred)
        try:
            gone = {v: why for v, why in self.left_out().items() if jaxlib_accepted(jax_version, minimum, v)}
        except ReproBundleError:
            gone = {}
        missing = "; ".join([*(f"jax {v} is {why}" for v, why in gone.items()), *failed])
        scope = f" up to jax {self.newest}'s" if self.newest else ""
        return (f"its jax/version.py reads {jax_version} and needs {minimum or 'no minimum'} as its "
                f"_minimum_jaxlib_version, so it imports only over {span} (JAX's check at import refuses an older "
                f"jaxlib and a newer one); no installable release{scope} has one ({ends}"
                f"{'; ' + missing if missing else ''}): it is skipped, as git bisect skip, and the search goes on "
                "around it. Where it is an end of the window (or the first bad commit could be among such commits), "
                "a window whose commits a released jaxlib runs is the way out: a later good release (--good), or an "
                "earlier commit as the bad end (--bad COMMIT)")


def refuse_older_jaxlib(sha: str, minimum: str | None, over: str, jaxlib: str | None = None,
                        jax_version: str | None = None) -> None:
    """UsageError when JAX at `sha` needs a jaxlib newer than `jaxlib`, that of jax `over`'s environment (None: not
    built yet, so at most the release's own): it would not import there; or, given the commit's `jax_version` and
    the environment's `jaxlib`, when that jaxlib is newer than the commit's version (JAX's check at import refuses
    it both ways)."""
    have = jaxlib or over
    if minimum is not None and version_key(have) < version_key(minimum):
        held = f"has jaxlib {have}" if jaxlib else f"can have no jaxlib newer than {have}"
        raise UsageError(f"JAX at {sha[:10]} needs jaxlib {minimum} or newer (its _minimum_jaxlib_version), and jax "
                         f"{over}'s environment {held}",
                         hint=f"pass --over a release whose jaxlib is {minimum} or newer, or take an earlier commit: "
                              "`git log -L '/_minimum_jaxlib_version/,+1:jax/version.py'` shows when it was raised")
    if jaxlib and jax_version and not jaxlib_accepted(jax_version, None, jaxlib):
        raise UsageError(f"JAX at {sha[:10]} reads version {jax_version}, and jax {over}'s environment has jaxlib "
                         f"{jaxlib}, newer than that: JAX's check at import refuses it (\"jaxlib version {jaxlib} is "
                         f"newer than and incompatible with jax version {jax_version}\")",
                         hint=f"pass --over a release whose jaxlib is in {accepted_range(jax_version, minimum)}")


def _site_packages(env: JaxEnvironment) -> Path:
    assert env.path is not None
    found = sorted(env.path.glob("lib/python3*/site-packages")) or sorted(env.path.glob("Lib/site-packages"))
    if not found:
        raise EnvironmentCreationError(f"the environment {env.path} has no site-packages folder")
    return found[0]


def commit_environment(repo: JaxRepo, sha: str, over: JaxEnvironment, folder: Path) -> Path:
    """The environment of JAX at `sha` over the released environment `over`, made under `folder` (a bisection's
    own: the caller removes it), or found there again: the PATH to replay it with, as `--jax PATH`."""
    final = folder / _name(sha, over)
    if (final / METADATA).exists():
        return final
    tmp = folder / f".tmp-{final.name}-{secrets.token_hex(4)}"
    try:
        _make(repo, sha, over, tmp)
        os.rename(tmp, final)
    finally:
        rmtree(tmp)
    return final


def _name(sha: str, over: JaxEnvironment) -> str:
    assert over.path is not None
    return f"{sha[:12]}-over-{over.path.name}"


def _make(repo: JaxRepo, sha: str, over: JaxEnvironment, folder: Path) -> None:
    assert over.path is not None
    site = _site_packages(over)
    mine = folder / site.relative_to(over.path)
    mine.mkdir(parents=True)
    (folder / "bin").mkdir()
    interpreter = over.path / "bin" / "python"
    os.symlink(os.path.realpath(interpreter), folder / "bin" / "python")
    cfg = (over.path / "pyvenv.cfg").read_text()
    cfg = re.sub(r"(?m)^include-system-site-packages\s*=.*$", "include-system-site-packages = false", cfg)
    (folder / "pyvenv.cfg").write_text(cfg)
    repo.export_jax(sha, mine)
    base_version, _ = repo.versions_at(sha)
    version = f"{base_version}.dev0+{sha[:12]}"
    _stamp_version(mine / "jax" / "version.py", version, sha)
    info = mine / f"jax-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: jax\nVersion: {version}\n")
    (info / "INSTALLER").write_text("reprobundle\n")
    (mine / "_reprobundle_over.pth").write_text(f"{site}\n")
    meta = {"commit": sha, "jax_version": version, "over": str(over.path), "jaxlib_version": over.jaxlib_version,
            "created": datetime.now(UTC).isoformat(timespec="seconds"), "size_bytes": dir_size(folder)}
    (folder / METADATA).write_text(json.dumps(meta, indent=1))


def _stamp_version(path: Path, version: str, sha: str) -> None:
    """`jax.__version__` the commit's version and `jax.version._git_hash` its hash, written into version.py as JAX's
    own wheel build writes them (`_release_version`, `_git_hash`), so a run records which JAX ran, not a date-stamped
    guess from a tree with no git."""
    text = path.read_text()
    text = re.sub(r"(?m)^_release_version\b.*$", f"_release_version: str = {version!r}", text)
    text = re.sub(r"(?m)^_git_hash\b.*$", f"_git_hash: str = {sha!r}", text)
    path.write_text(text)


def _kept_folder(root: Path) -> Path:
    return root / COMMITS_DIR / KEPT_DIR


def kept_environment(repo: JaxRepo, sha: str, over: JaxEnvironment, root: Path) -> tuple[Path, bool]:
    """(the kept environment of JAX at `sha` over `over`, under the environment root `root`; whether it was made
    now rather than found). One maker at a time per commit (a lock), made atomically (commit_environment)."""
    folder = _kept_folder(root)
    with file_lock(root / ".locks" / f"jax-commit-{sha[:12]}.lock"):
        folder.mkdir(parents=True, exist_ok=True)
        made = not (folder / _name(sha, over) / METADATA).exists()
        return commit_environment(repo, sha, over, folder), made


def kept_environments(root: Path) -> list[JaxEnvironment]:
    """The finished kept commit environments under the environment root `root`, by version; one whose release
    environment is gone is left out (`remove_kept` with no request removes it)."""
    try:
        folders = sorted(d for d in _kept_folder(root).iterdir() if not d.name.startswith("."))
    except OSError:
        return []
    found = [env for d in folders if (env := described(str(d))) is not None]
    return sorted(found, key=lambda e: (version_key(e.jax_version), e.build))


def remove_kept(root: Path, env: JaxEnvironment | None = None) -> None:
    """Remove the kept commit environment `env` (renamed out of view, then deleted), or, when None, every kept one
    and what interrupted makings left."""
    if env is None:
        for d in list(_kept_folder(root).glob("*")):
            if d.name.startswith("."):
                rmtree(d)
            else:
                discard(root, d)
        return
    assert env.path is not None
    with file_lock(root / ".locks" / f"jax-commit-{env.path.name[:12]}.lock"):
        if env.path.exists():
            discard(root, env.path)



def described(request: str) -> JaxEnvironment | None:
    """The commit environment at the folder `request` names, as its metadata and the release environment under it
    describe it (no interpreter started: a probe's environment is known at once); None when the folder is no
    finished commit environment or the release environment under it is gone."""
    folder = Path(request.strip()).expanduser()
    try:
        meta = json.loads((folder / METADATA).read_text())
    except (OSError, ValueError):
        return None
    over = read_env(Path(str(meta.get("over"))))
    if over is None or not (folder / "bin" / "python").exists():
        return None
    return JaxEnvironment(str(meta["jax_version"]), (folder / "bin" / "python").absolute(), over.python_version,
                          folder.absolute(), meta.get("created"), meta.get("size_bytes"), over.jaxlib_version,
                          over.numpy_version, build=over.build, local=True, commits=(("jax", str(meta["commit"])),),
                          over=over.jax_version)


def first_bad_line(answer: dict) -> str:
    """`first bad commit: a7b01146f2 <title> (#NNNN)`, or what a commit bisection's answer found instead (one
    line)."""
    from ..text import clean

    first = answer.get("first_bad")
    if not first:
        return clean(str(answer.get("text") or "no first bad commit"))
    return clean(f"first bad commit: {commit_headline(first)}")
