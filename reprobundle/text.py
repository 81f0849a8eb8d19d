"""Text from outside made safe for a terminal and short enough for one line: what render/, the CLI and every error
message use for values from bundles, stores, records and foreign exceptions."""

from __future__ import annotations

import re
from typing import Any, Sequence, overload


def clean(text: object, limit: int | None = 200, *, newlines: bool = False) -> str:
    """`text` made safe to print on a terminal, cut to `limit` characters (with "…"; None: no cut).

    Every character that is not printable (control characters, so escape sequences lose their ESC; C1 controls;
    bidirectional overrides and other format characters) is written as its Python escape (`\\x1b`, `\\u202e`); a
    newline too unless `newlines` keeps them (text laid out in lines, not one value). Everything reprobundle prints
    from a bundle, a store or an error message goes through this, or through `terminal_text` for whole outputs.
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case, at C speed
        return s if limit is None or len(s) <= limit else s[:max(limit - 1, 0)] + "…"
    shown = _escaped(s, limit, newlines)
    return shown if limit is None or len(shown) <= limit else shown[:max(limit - 1, 0)] + "…"


def _escaped(s: str, limit: int | None, newlines: bool) -> str:
    """`s` with every character `clean` must not print written as its escape, stopped once past `limit`."""
    if limit is not None and len(s) > limit * 8:  # escaping never shortens: cut what can never be shown first
        s = s[:limit * 8]
    out = []
    size = 0
    for ch in s:
        if ch.isprintable() or ch == " " or (newlines and ch in "\n\t"):
            piece = ch
        else:
            piece = ch.encode("unicode_escape").decode("ascii")
        out.append(piece)
        size += len(piece)
        if limit is not None and size > limit:
            break
    return "".join(out)


def quoted(value: object, limit: int = 80) -> str:
    """A value from outside (a ref, a name, a key, a file's content) quoted for a message: `'text'`, escaped and cut
    by `clean`, so a message never echoes megabytes or terminal controls."""
    return "'" + clean(value, limit).replace("'", "\\'") + "'"


_SGR_RE = re.compile(r"\x1b\[[0-9;]*m")


def terminal_text(text: str) -> str:
    """A whole output (lines laid out by render/) made safe for a terminal: what `clean` escapes is escaped, except
    newlines, tabs and the SGR colour sequences (`ESC [ ... m`) a renderer adds itself. The net under the per-value
    `clean` calls: it stops screen clearing, cursor moves and titles, not forged lines (only `clean` stops those)."""
    if text.isprintable():
        return text
    def lines(part: str) -> str:
        return "\n".join(clean(line, None, newlines=True) for line in part.split("\n"))

    out = []
    pos = 0
    for m in _SGR_RE.finditer(text):
        out.append(lines(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(lines(text[pos:]))
    return "".join(out)


@overload
def clean_values(obj: dict[Any, Any]) -> dict[Any, Any]: ...


@overload
def clean_values(obj: object) -> object: ...


def clean_values(obj: object) -> object:
    """A copy of plain data (maps, lists, strings...) with every string made one safe line by `clean`: what a
    renderer that lays out values from bundles and run records gets, so none of them adds a line or a control."""
    if isinstance(obj, str):
        return clean(obj, None)
    if isinstance(obj, dict):
        return {clean_values(k): clean_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_values(v) for v in obj]
    return obj


def cut(text: str, width: int) -> str:
    """`text` cut to `width` characters, the last one an ellipsis when it had more (a table cell, a status line)."""
    return text if len(text) <= width else text[:max(1, width - 1)] + "…"


def counted(n: int, noun: str) -> str:
    """`1 op`, `3 ops`: a count and its noun, plural where it is not one."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def did_you_mean(word: str, choices: Sequence[str], *, n: int = 3, cutoff: float = 0.6) -> str:
    """`did you mean 'a' or 'b'?` for the choices close to `word` (difflib), or "" where none is."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def first_line(text: object, limit: int = 200) -> str:
    """The first non-empty line of a message, escaped and cut to `limit` characters by `clean`: what one error line
    shows."""
    lines = [line for line in str(text or "").strip().splitlines() if line.strip()]
    return clean(lines[0].strip() if lines else "", limit)


def exception_line(e: BaseException, limit: int = 200) -> str:
    """`TypeError: the first line of its message`: a foreign exception in one line."""
    return f"{type(e).__name__}: {first_line(e, limit)}"
