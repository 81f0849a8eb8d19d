"""The docs cannot drift from the CLI: every `reprobundle ...` line in a shell block of the README and the pages under
docs/, and every inline `reprobundle ...` span of their prose, names a command the CLI has and only options that command takes; every relative link points at a file that
exists; the README links every page. (Running the blocks would install releases and time replays: minutes of the
suite for what a parse checks.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from reprobundle.cli import app

ROOT = Path(__file__).resolve().parent.parent
NO_COMMANDS = {"architecture.md", "development.md", "errors.md", "format.md"}
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|console)\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
INLINE = re.compile(r"`(?:\.venv/bin/)?reprobundle ([^`]+)`")
INVOCATION = re.compile(r"(?:^|[;&|(]\s*|\s)(?:\.venv/bin/)?reprobundle(?=\s)(.*)")


def shell_lines(text: str) -> list[str]:
    """The lines of the page's shell blocks, continuations joined, comments dropped."""
    lines: list[str] = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def invocations(text: str) -> list[list[str]]:
    """Each `reprobundle ...` call in the page's shell blocks as its words, up to a comment or a shell operator."""
    calls = []
    for line in shell_lines(text):
        match = INVOCATION.search(line)
        if not match:
            continue
        lexer = shlex.shlex(match.group(1), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, "#"
        words = []
        for word in lexer:
            if word and set(word) <= set(";&|"):
                break
            words.append(word)
        calls.append(words)
    return calls


def inline_invocations(text: str) -> list[list[str]]:
    return [shlex.split(span, comments=True) for span in INLINE.findall(text)]


def cli_options() -> tuple[set[str], dict[str, set[str]]]:
    group = typer.main.get_command(app)
    top = {o for p in group.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    commands = {name: {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
                for name, cmd in group.commands.items()}  # type: ignore[attr-defined]
    return top, commands


def check_call(words: list[str], top: set[str], commands: dict[str, set[str]]) -> str | None:
    """What is wrong with one call (None: nothing)."""
    rest = list(words)
    while rest and rest[0].startswith("-"):
        if rest[0] not in top:
            return f"{rest[0]} is no option of reprobundle itself"
        rest.pop(0)
    if not rest and words and words[-1] in ("--version", "--help"):  # eager: they need no command
        return None
    if not rest or rest[0] not in commands:
        return f"{rest[0] if rest else '(nothing)'} is no command"
    name, known = rest[0], commands[rest[0]]
    if name == "capture" and "--" in rest:  # what follows `--` is the captured program's own command line
        rest = rest[:rest.index("--")]
    for word in rest[1:]:
        if word.startswith("--") and len(word) > 2 and word.split("=", 1)[0] not in known:
            return f"{word.split('=', 1)[0]} is no option of `reprobundle {name}`"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_and_option_a_page_names_exists(page):
    top, commands = cli_options()
    text = page.read_text()
    calls = invocations(text) + inline_invocations(text)
    assert calls or page.name in NO_COMMANDS, f"{page.name} names no command: is the parse broken?"
    problems = [f"`reprobundle {' '.join(c)}`: {why}" for c in calls if (why := check_call(c, top, commands))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_a_file(page):
    missing = [target for target in LINK.findall(page.read_text())
               if not target.startswith(("http://", "https://", "mailto:"))
               and not (page.parent / target).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_the_readme_links_every_page_and_stays_short():
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / t).resolve() for t in LINK.findall(readme)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"
    assert len(readme.splitlines()) <= 150, "the README is the path a newcomer reads to the end: keep the reference in docs/"


def test_the_check_catches_a_typo():
    top, commands = cli_options()
    text = "```bash\nreprobundle explain loop --jax 0.4.31 --jax 0.4.33 --no-relese-delta  # typo\n```\n"
    assert check_call(invocations(text)[0], top, commands) == "--no-relese-delta is no option of `reprobundle explain`"
    text = "```bash\nreprobundle -v investgate loop --good 0.4.30 --bad 0.4.35\n```\n"
    assert check_call(invocations(text)[0], top, commands) == "investgate is no command"
    text = "```bash\ncd x && reprobundle replay loop --jax 0.8.0 | tee out.txt\n```\n"
    assert invocations(text) == [["replay", "loop", "--jax", "0.8.0"]]
