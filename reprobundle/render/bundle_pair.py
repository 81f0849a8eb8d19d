"""Two bundles of one program traced by two releases (`compare A B`), as terminal text: the headline, the lowering
diff, the timings side by side."""

from __future__ import annotations

import textwrap

from ..units import human_ns
from .explain import verdict_text
from .listing import table

HEADERS = ["timed", "A", "A median", "B", "B median", "B / A"]


def _side(summary: dict) -> str:
    status = "" if summary["status"] == "ok" else f" ({summary['status']})"
    label = summary["label"]
    if label in (summary["jax"], "installed"):
        return f"jax {summary['jax']}{' (installed)' if label == 'installed' else ''}{status}"
    return f"{label} on jax {summary['jax']}{status}"


def _ratio(row: dict) -> str:
    v = row["verdict"]
    if v and not v.get("settled"):  # its direction is not decided yet: the interval is what is known
        ci = v.get("ci95")
        return f"{v['ratio']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "") + ", not settled"
    if v:
        return verdict_text(v)
    return "-" if row["ratio"] is None else f"({row['ratio']:.2f}x, apart)"


def _median(summary: dict) -> str:
    return "-" if summary["median_ns"] is None else human_ns(summary["median_ns"])


def pair_text(data: dict, width: int = 100) -> str:
    a, b = data["bundles"]
    lines = textwrap.wrap(data["headline"], width) + [
        "", f"A: {a['ref']} (traced by jax {a['traced_by']})", f"B: {b['ref']} (traced by jax {b['traced_by']})"]
    lowering = data.get("lowering")
    if lowering is not None:
        said = lowering["text"] if lowering["changed"] else "no change (locations, names and debug info aside)"
        lines += ["", *textwrap.wrap(f"lowering, A -> B: {said}", width, subsequent_indent="  ")]
    rows = [[r["label"], _side(r["a"]), _median(r["a"]), _side(r["b"]), _median(r["b"]), _ratio(r)]
            for r in data["rows"]]
    lines += ["", table(HEADERS, rows)]
    if any(r["label"].startswith("jax ") for r in data["rows"]):
        lines += textwrap.wrap("a row `jax V` compiled A and B with one release's XLA: their difference is JAX's "
                               "lowering alone; each on the release that traced it is the whole upgrade", width)
    for note in data.get("notes") or []:
        lines += textwrap.wrap(f"note: {note}", width, subsequent_indent="  ")
    return "\n".join(lines)
