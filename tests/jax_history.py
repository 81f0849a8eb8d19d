"""A JAX git history made from two cached releases' JAX packages (no network): the good release's `jax/` at tag
jax-v0.4.30, then the changes to 0.4.31's split file by file into real commits, one of them broken at import:

    c1  version.py (0.4.31's: _version 0.4.31, _minimum_jaxlib_version 0.4.30)
    c2  every other changed file but jax/_src/numpy/ufuncs.py        (0.4.30's jnp.floor still)
    c3  jax/_src/numpy/ufuncs.py: floor of an integer is the integer  (the lowering change), and its CHANGELOG.md
        entry, with a workaround, under the older heading "jax 0.4.30" (as JAX's bf16 `jnp.arange` entry sits
        under 0.9.2's heading though it shipped in 0.10.0)
    c4  jax/_src/broken_import.py imported by jax/__init__.py, raising (does not import: skipped)
    c5  the broken import taken out again
    c6  "Prepare for JAX release 0.4.31": the XLA pin moved, tagged jax-v0.4.31

Each tag pins an XLA commit in third_party/xla/workspace.bzl, as JAX's tags do (made-up hashes: the test reads
them back, it does not look them up)."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
from pathlib import Path

UFUNCS = "_src/numpy/ufuncs.py"
XLA_PINS = {"0.4.30": "1" * 40, "0.4.31": "2" * 40, "0.4.35": "3" * 40, "0.4.36": "4" * 40, "0.4.33": "5" * 40}
PULL = "https://github.com/jax-ml/jax/pull/22222"
TITLES = ["Bump the version to 0.4.31", "Sync the rest of 0.4.31 but jnp.floor",
          "jnp.floor: an integer input is returned as it is", "Import a module that does not work yet",
          "Take the broken import out again", "Prepare for JAX release 0.4.31"]


def site_jax(env) -> Path:
    (site,) = sorted(Path(env.path).glob("lib/python3*/site-packages"))
    return site / "jax"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
           "GIT_COMMITTER_NAME": "Test Author", "GIT_COMMITTER_EMAIL": "author@example.com",
           "GIT_AUTHOR_DATE": "2024-07-01T12:00:00+00:00", "GIT_COMMITTER_DATE": "2024-07-01T12:00:00+00:00"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _commit(repo: Path, title: str, body: str = "") -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", title, *(["-m", body] if body else []))
    return _git(repo, "rev-parse", "HEAD").strip()


def _copy(src: Path, dst: Path, names) -> None:
    for name in names:
        target = dst / name
        if (src / name).exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, target)
        elif target.exists():
            target.unlink()


CHANGELOG = "# Change log\n\n## jax 0.4.30 (June 18, 2024)\n\n* Changes:\n  * An older entry.\n"
FLOOR_ENTRY = ("  * {func}`jax.numpy.floor` of an integer array now returns the array unchanged, with no\n"
               "    round trip through float32. To recover the previous behavior, use\n"
               "    `jnp.floor(x.astype(jnp.float32)).astype(x.dtype)`.\n")
WORKAROUND = "`jnp.floor(x.astype(jnp.float32)).astype(x.dtype)`"


def _pin(repo: Path, version: str) -> None:
    bzl = repo / "third_party" / "xla" / "workspace.bzl"
    bzl.parent.mkdir(parents=True, exist_ok=True)
    bzl.write_text(f'XLA_COMMIT = "{XLA_PINS[version]}"\nXLA_SHA256 = "0"\n')


def _started(repo: Path, old: Path, new: Path, version: str) -> list[str]:
    """A new repository at `repo` holding release `version`'s `jax/` (`old`), CHANGELOG and XLA pin, tagged; the
    files that differ between `old` and `new`, sorted."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(old, repo / "jax", ignore=shutil.ignore_patterns("__pycache__"))
    _pin(repo, version)
    (repo / "CHANGELOG.md").write_text(CHANGELOG)
    _commit(repo, f"jax {version}")
    _git(repo, "tag", f"jax-v{version}")
    a, b = _files(old), _files(new)
    return sorted(n for n in a | b if n not in a or n not in b or not filecmp.cmp(old / n, new / n, shallow=False))


def make_history(repo: Path, old: Path, new: Path) -> list[str]:
    """The history above in a new repository at `repo` from the `jax/` folders `old` (0.4.30) and `new` (0.4.31);
    the commits' hashes, c1 first."""
    changed = _started(repo, old, new, "0.4.30")
    rest = [n for n in changed if n not in ("version.py", UFUNCS)]
    jax = repo / "jax"
    shas = []
    _copy(new, jax, ["version.py"])
    shas.append(_commit(repo, TITLES[0]))
    _copy(new, jax, rest)
    shas.append(_commit(repo, TITLES[1]))
    _copy(new, jax, [UFUNCS])
    (repo / "CHANGELOG.md").write_text(CHANGELOG.replace("* Changes:\n", "* Changes:\n" + FLOOR_ENTRY))
    shas.append(_commit(repo, TITLES[2], f"COPYBARA_INTEGRATE_REVIEW={PULL} from someone:floor-ints"))
    (jax / "_src" / "broken_import.py").write_text('raise ImportError("this module does not work yet")\n')
    init = (jax / "__init__.py").read_text()
    (jax / "__init__.py").write_text(init + "\nimport jax._src.broken_import  # noqa\n")
    shas.append(_commit(repo, TITLES[3]))
    (jax / "_src" / "broken_import.py").unlink()
    (jax / "__init__.py").write_text(init)
    shas.append(_commit(repo, TITLES[4]))
    _pin(repo, "0.4.31")
    shas.append(_commit(repo, TITLES[5]))
    _git(repo, "tag", "jax-v0.4.31")
    return shas


def retag(repo: Path, tag: str, sha: str) -> None:
    _git(repo, "tag", "-f", tag, sha)


PATCH_TITLES = ["Merge back the patch release: version.py reads 0.4.30 again",
                "jnp.floor: an integer input goes through float32 again", "Bump the version to 0.4.32"]


def _set_versions(jax: Path, version: str, minimum: str) -> None:
    path = jax / "version.py"
    text = re.sub(r'(?m)^_version = ".*"$', f'_version = "{version}"', path.read_text())
    path.write_text(re.sub(r'(?m)^_minimum_jaxlib_version = ".*"$', f'_minimum_jaxlib_version = "{minimum}"', text))


def add_patch_window(repo: Path, old: Path) -> list[str]:
    """Three commits after jax-v0.4.31 on main, as JAX's main after a patch release (after jax-v0.4.33 its commits
    read 0.4.32, and JAX's check at import refuses jaxlib 0.4.33 under them):

        c7  version.py reads 0.4.30 (_minimum_jaxlib_version 0.4.30): it refuses jaxlib 0.4.31, takes 0.4.30
        c8  jax/_src/numpy/ufuncs.py as 0.4.30 had it: the floor through float32 again (the lowering change)
        c9  version.py reads 0.4.32 (_minimum_jaxlib_version 0.4.31): it takes jaxlib 0.4.31 again

    `old`: 0.4.30's `jax/` folder. The commits' hashes, c7 first."""
    jax = repo / "jax"
    _set_versions(jax, "0.4.30", "0.4.30")
    shas = [_commit(repo, PATCH_TITLES[0])]
    _copy(old, jax, [UFUNCS])
    shas.append(_commit(repo, PATCH_TITLES[1]))
    _set_versions(jax, "0.4.32", "0.4.31")
    shas.append(_commit(repo, PATCH_TITLES[2]))
    return shas


LAX = "_src/lax/lax.py"
# jax 0.4.35's lowering of arccos (a formula of atan2), which jax 0.4.36 replaced by chlo.acos (the later change of
# tests/programs/retrace/acos_after_rolls.py); as 0.4.35's lax.py has it
ACOS_BEFORE = """def acos_impl(x):
  if dtypes.issubdtype(_dtype(x), np.complexfloating):
    result = mul(_const(x, 1j), acosh(x))
    # By convention, numpy chooses the branch with positive real part.
    rpart = real(result)
    return select(
      gt(rpart, _const(rpart, 0)),
      result,
      neg(result)
    )
  else:
    return select(
        ne(x, _const(x, -1.0)),
        mul(_const(x, 2),
            atan2(sqrt(sub(_const(x, 1), square(x))), add(_const(x, 1), x))),
        full_like(x, np.pi))

mlir.register_lowering(acos_p,
                       mlir.lower_fun(acos_impl, multiple_results=False))
"""
ACOS_AFTER = "mlir.register_lowering(acos_p, partial(_nary_lower_hlo, chlo.acos))\n"
ACOS_TITLES = ["Bump the version to 0.4.36", "Sync the rest of 0.4.36 (and its minimum jaxlib) but the lowering of acos",
               "Lower acos to chlo.acos", "Prepare for JAX release 0.4.36"]


def make_acos_history(repo: Path, old: Path, new: Path) -> list[str]:
    """A JAX history from jax 0.4.35's `jax/` (`old`, tag jax-v0.4.35) to 0.4.36's (`new`, tag jax-v0.4.36):

        a1  version.py reads 0.4.36, its _minimum_jaxlib_version still 0.4.35's (0.4.34): over jaxlib 0.4.35
        a2  every other changed file, version.py's minimum 0.4.36 (over jaxlib 0.4.36 from here), and
            jax/_src/lax/lax.py as 0.4.36's but for its lowering of acos (0.4.35's)
        a3  jax/_src/lax/lax.py as 0.4.36 has it: acos lowered to chlo.acos (the lowering change)
        a4  "Prepare for JAX release 0.4.36": the XLA pin moved, tagged jax-v0.4.36

    The commits' hashes, a1 first."""
    changed = _started(repo, old, new, "0.4.35")
    jax = repo / "jax"
    _set_versions(jax, "0.4.36", "0.4.34")
    shas = [_commit(repo, ACOS_TITLES[0])]
    _copy(new, jax, changed)
    lax = jax / LAX
    text = lax.read_text()
    assert text.count(ACOS_AFTER) == 1, "jax 0.4.36's lax.py lowers acos another way than this history expects"
    lax.write_text(text.replace(ACOS_AFTER, ACOS_BEFORE))
    shas.append(_commit(repo, ACOS_TITLES[1]))
    _copy(new, jax, [LAX])
    shas.append(_commit(repo, ACOS_TITLES[2], f"COPYBARA_INTEGRATE_REVIEW={PULL} from someone:acos"))
    _pin(repo, "0.4.36")
    shas.append(_commit(repo, ACOS_TITLES[3]))
    _git(repo, "tag", "jax-v0.4.36")
    return shas


NN = "_src/nn/functions.py"
# jax 0.4.33's exact GELU and 0.4.34's (ca97af9d43, "Change the default implementation of GeLU to a numerically
# stable formulation"), as their jax/_src/nn/functions.py have them
GELU_BEFORE = """    sqrt_2 = np.sqrt(2).astype(x_arr.dtype)
    return jnp.array(x_arr * (lax.erf(x_arr / sqrt_2) + 1) / 2, dtype=x_arr.dtype)
"""
GELU_AFTER = """    sqrt_half = np.sqrt(0.5).astype(x_arr.dtype)
    return jnp.array(
        0.5 * x_arr * (lax.erfc(-x_arr * sqrt_half)), dtype=x_arr.dtype
    )
"""
GELU_TITLES = ["Merge main after the patch release: version.py reads 0.4.32", "Bump the version to 0.4.34",
               "Change the default implementation of GeLU to a numerically stable formulation"]


def make_gelu_history(repo: Path, old: Path) -> list[str]:
    """A JAX history after the patch release 0.4.33 (`old`: jax 0.4.33's `jax/`, tag jax-v0.4.33), as JAX's main
    after jax-v0.4.33 (its first commits read 0.4.32, and JAX's check at import refuses jaxlib 0.4.33 under them):

        g1  version.py reads 0.4.32 (_minimum_jaxlib_version 0.4.31): over jaxlib 0.4.31, where the CPU thunk
            runtime is off, so a program's float32 sums differ from 0.4.33's in their last bits
        g2  version.py reads 0.4.34 (_minimum_jaxlib_version 0.4.33): over jax 0.4.33's jaxlib from here
        g3  jax/_src/nn/functions.py's exact GELU as 0.4.34 has it (the lowering change: erfc for 1 + erf)

    The commits' hashes, g1 first."""
    _started(repo, old, old, "0.4.33")
    jax = repo / "jax"
    _set_versions(jax, "0.4.32", "0.4.31")
    shas = [_commit(repo, GELU_TITLES[0])]
    _set_versions(jax, "0.4.34", "0.4.33")
    shas.append(_commit(repo, GELU_TITLES[1]))
    nn = jax / NN
    text = nn.read_text()
    assert text.count(GELU_BEFORE) == 1, "jax 0.4.33's nn/functions.py computes gelu another way than expected"
    nn.write_text(text.replace(GELU_BEFORE, GELU_AFTER))
    shas.append(_commit(repo, GELU_TITLES[2]))
    return shas


def publish_notes(repo: Path, version: str, notes: str) -> str:
    """A commit on the main line whose CHANGELOG.md opens with `notes` (a `## ` section of JAX's notes) before the
    rest, tagged jax-v`version` (the tag moved there): the notes as JAX's tag of that release holds them. Its hash."""
    path = repo / "CHANGELOG.md"
    head, _, rest = path.read_text().partition("\n## ")
    path.write_text(f"{head}\n{notes.rstrip()}\n\n## {rest}")
    sha = _commit(repo, f"Release notes of {version}")
    retag(repo, f"jax-v{version}", sha)
    return sha


CONFIG = "_src/config.py"
RANDINT_TITLES = ["Tidy an unrelated module", "[dep] remove deprecated `jax_safer_randint` configuration for JAX v0.9.0",
                  "Prepare for JAX release 0.9.0", "Sync to 0.12.1's configuration"]
_SAFER_RANDINT = re.compile(r"def _safer_randint_deprecation.*?validator=_safer_randint_deprecation\n\)\n", re.S)


def make_option_removal_history(repo: Path, old: Path, new: Path) -> list[str]:
    """The removal of the JAX option `jax_safer_randint`, as JAX's history has it (a9dac1167d, in 0.9.0), over the
    `jax/` folders of 0.8.0 (`old`) and 0.12.1 (`new`), with only their jax/_src/config.py:

        tag jax-v0.8.0  0.8.0's config.py (it defines the option, deprecated since 0.7.2)
        r1  another file changed
        r2  config.py without the option (the removal)
        r3  "Prepare for JAX release 0.9.0", tagged jax-v0.9.0
        r4  0.12.1's config.py, tagged jax-v0.12.1

    The commits' hashes, r1 first."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    config = repo / "jax" / CONFIG
    config.parent.mkdir(parents=True)
    text = (old / CONFIG).read_text()
    config.write_text(text)
    (repo / "CHANGELOG.md").write_text(CHANGELOG)
    _commit(repo, "jax 0.8.0")
    _git(repo, "tag", "jax-v0.8.0")
    (config.parent / "tidy.py").write_text("TIDY = True\n")
    shas = [_commit(repo, RANDINT_TITLES[0])]
    removed, count = _SAFER_RANDINT.subn("", text)
    assert count == 1 and "'jax_safer_randint'" not in removed, "0.8.0 defines jax_safer_randint another way"
    config.write_text(removed)
    shas.append(_commit(repo, RANDINT_TITLES[1]))
    (repo / "CHANGELOG.md").write_text(CHANGELOG.replace("## jax 0.4.30", "## JAX 0.9.0 (January 20, 2026)\n\n## jax 0.4.30"))
    shas.append(_commit(repo, RANDINT_TITLES[2]))
    _git(repo, "tag", "jax-v0.9.0")
    config.write_text((new / CONFIG).read_text())
    shas.append(_commit(repo, RANDINT_TITLES[3]))
    _git(repo, "tag", "jax-v0.12.1")
    return shas
