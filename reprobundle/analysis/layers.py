"""Which layer moved: XLA (the compiler) or JAX's lowering, from frozen and retraced runs of the same versions.

Where a version ran both frozen and retraced, and the baseline's release ran frozen, the change splits in two ratios,
each a paired verdict of two runs timed together:
- compiler: the frozen run of the version against the frozen run of the baseline's release (the same StableHLO, so
  only XLA and the runtime differ);
- lowering: the retraced run of the version against its frozen run (the same XLA, so only the program JAX lowered
  differs).
A headline names the layer when the verdicts settle it: one moved and the other is the same. No I/O.
"""

from __future__ import annotations

from typing import Callable

from .verdict import timing_verdict

FROZEN, RETRACE = "frozen", "retrace"


def _pair(base: dict, cand: dict) -> dict | None:
    if not base["samples_ns"] or not cand["samples_ns"]:
        return None
    v = timing_verdict({"samples_ns": base["samples_ns"], **base["schedule"]},
                       {"samples_ns": cand["samples_ns"], **cand["schedule"]})
    return {"ratio": v["ratio"], "verdict": v["verdict"], "ci95": v["ci95"], "method": v["method"],
            "settled": v.get("settled", False), "base": base["label"], "cand": cand["label"]}


def layer_split(rows: list[dict], base: dict | None) -> list[dict]:
    """Per version that ran in both modes: {"jax", "compiler": pair|None, "lowering": pair|None, "text",
    "layer": "compiler"|"lowering"|"both"|"neither"|None}; a pair is {"ratio", "verdict", "ci95", "method",
    "base", "cand"}."""
    timed = [r for r in rows if r["status"] in ("ok", "mismatch") and r.get("mode") in (FROZEN, RETRACE)]
    frozen = {r["contender_jax"]: r for r in timed if r["mode"] == FROZEN}
    retraced = {r["contender_jax"]: r for r in timed if r["mode"] == RETRACE}
    base_frozen = frozen.get(base["contender_jax"]) if base is not None and base.get("mode") == FROZEN else None
    out = []
    for jax, traced in retraced.items():
        mine = frozen.get(jax)
        if mine is None:
            continue
        compiler = _pair(base_frozen, mine) if base_frozen is not None and base_frozen is not mine else None
        lowering = _pair(mine, traced)
        out.append({"jax": jax, "compiler": compiler, "lowering": lowering, "layer": _layer(compiler, lowering),
                    "text": split_text(jax, compiler, lowering)})
    return out


def _layer(compiler: dict | None, lowering: dict | None) -> str | None:
    moved = _judged(compiler, lowering, lambda pair: pair["verdict"] in ("slower", "faster"))
    same = _judged(compiler, lowering, lambda pair: pair["verdict"] == "same" and bool(pair["settled"]))
    compiler_same = compiler is None or same.get("compiler")  # no compiler pair: only the lowering can have moved
    if moved.get("compiler") and moved.get("lowering"):
        return "both"
    if moved.get("lowering") and compiler_same:
        return "lowering"
    if moved.get("compiler") and same.get("lowering"):
        return "compiler"
    if same.get("lowering") and compiler_same:
        return "neither"
    return None


def _judged(compiler: dict | None, lowering: dict | None, test: Callable[[dict], bool]) -> dict[str, bool]:
    """{"compiler": test(pair), "lowering": test(pair)}, for the pairs there are."""
    return {name: test(pair) for name, pair in (("compiler", compiler), ("lowering", lowering)) if pair is not None}


def split_text(jax: str, compiler: dict | None, lowering: dict | None) -> str:
    """`compiler: 1.00x (frozen replay on 0.8.0 vs 0.7.2), lowering: 1.25x (retraced vs frozen on 0.8.0)`."""
    parts = []
    if compiler is not None and compiler["ratio"]:
        parts.append(f"compiler: {compiler['ratio']:.2f}x (frozen replay on {jax} vs {compiler['base']})")
    if lowering is not None and lowering["ratio"]:
        parts.append(f"lowering: {lowering['ratio']:.2f}x (retraced vs frozen on {jax})")
    return ", ".join(parts)


def layer_headlines(split: list[dict]) -> list[dict]:
    """One headline per version whose verdicts settle which layer moved."""
    words = {"compiler": "XLA (the compiler) moved, JAX's lowering did not",
             "lowering": "JAX's lowering moved, XLA (the compiler) did not",
             "both": "both XLA (the compiler) and JAX's lowering moved",
             "neither": "neither XLA nor JAX's lowering moved the time"}
    return [{"label": item["jax"], "vs": None, "comparable": True, "direction": "layer",
             "text": f"jax {item['jax']}: {words[item['layer']]} ({item['text']})"}
            for item in split if item["layer"] is not None and item["text"]]
