"""Terminal tables, laid out by rich.table: columns two spaces apart, cells cut to their column with "…", colours
applied to cells after the layout (so widths count only visible characters), trailing blanks dropped."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style
from rich.table import Table
from rich.text import Text

# Cell styles by name (the comparison's verdict colours), in the 256-colour palette.
STYLES = {"slower": "bold color(166)", "faster": "bold color(25)", "same": "color(29)", "failed": "bold color(169)",
          "apart": "dim", "baseline": "bold", "unknown": ""}
GAP = 2  # blanks between columns


def _console(width: int, color: bool) -> Console:
    return Console(file=io.StringIO(), width=width, color_system="256" if color else None, force_terminal=color,
                   highlight=False, emoji=False, markup=False, legacy_windows=False, no_color=not color)


def _print(renderable, width: int, color: bool) -> list[str]:
    console = _console(width, color)
    console.print(renderable, crop=False)
    return [line.rstrip() for line in console.file.getvalue().split("\n")[:-1]]  # type: ignore[attr-defined]


def paint(text: str, style: str, color: bool) -> str:
    """`text` in the named style (STYLES) when `color`; else unchanged."""
    if not (color and STYLES.get(style) and text):
        return text
    return Style.parse(STYLES[style]).render(text, color_system=ColorSystem.EIGHT_BIT)


def _cell(text: str, style: str) -> Text:
    """A cell whose visible characters carry the style (a span: the column's padding stays plain)."""
    cell = Text(text)
    if STYLES.get(style) and text.strip():
        cell.stylize(STYLES[style], 0, len(text))
    return cell


def natural_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its widest cell, the header included."""
    return [max(cell_len(str(x)) for x in col) for col in zip(headers, *rows)]


def _fitted_widths(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None, flex: int,
                   indent: str) -> list[int]:
    """The natural widths; with `width`, column `flex` shrunk to what the others leave (at least 4)."""
    cols = natural_widths(headers, rows)
    if width is not None:
        flex %= len(cols)
        room = width - len(indent) - sum(w for i, w in enumerate(cols) if i != flex) - GAP * (len(cols) - 1)
        cols[flex] = max(4, min(cols[flex], room))
    return cols


def _styled_cells(row: Sequence[str], names: Sequence[str]) -> list[Text]:
    return [_cell(str(cell), names[j] if j < len(names) else "") for j, cell in enumerate(row)]


def grid(headers: Sequence[str], rows: Sequence[Sequence[str]], *, widths: Sequence[int] | None = None,
         width: int | None = None, flex: int = -1, styles: Sequence[Sequence[str]] | None = None,
         color: bool = False, indent: str = "", rule: bool = True) -> list[str]:
    """The table's lines: the headers, a rule of dashes under each column (`rule`), then the rows.

    Column widths are `widths`, else each column's widest cell; with `width`, column `flex` (default the last)
    shrinks to what the others leave (at least 4). `styles[i][j]` names the style of row i's cell j (STYLES)."""
    cols = list(widths) if widths is not None else _fitted_widths(headers, rows, width, flex, indent)
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, GAP // 2), header_style="",
                  show_header=True)
    for header, w in zip(headers, cols):
        table.add_column(Text(str(header)), width=w, no_wrap=True, overflow="ellipsis")
    if rule:
        table.add_row(*(Text("-" * w) for w in cols))
    for i, row in enumerate(rows):
        names = styles[i] if styles and i < len(styles) else ()
        table.add_row(*_styled_cells(row, names if color else ()))
    total = sum(cols) + GAP * (len(cols) - 1)
    return [(indent + line).rstrip() for line in _print(table, total, color)]
