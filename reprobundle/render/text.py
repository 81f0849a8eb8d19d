"""Rendering: plain data (for --json) and human text for bundles, refs and runs. No I/O beyond string building."""

from __future__ import annotations

from ..analysis.verdict import TimingSummary, timing_verdict
from ..bundle import trees
from ..bundle.registry import Bundle, BundleRef
from ..units import human_bytes, human_ns


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def ref_data(ref: BundleRef) -> dict:
    return {"name": ref.name, "version": ref.version, "bundle_id": ref.bundle_id, "url": ref.url,
            "store": ref.store_url}


def _input_bytes(m: dict) -> int:
    return sum(leaf["blob"]["size"] for leaf in m["inputs"]["leaves"] if "blob" in leaf)


def bundle_row(b: Bundle) -> dict:
    m = b.manifest
    env = m["environment"]
    timing = TimingSummary.of(m["reference"]["timing"]["samples_ns"])
    return {"ref": str(b.ref), "bundle_id": b.ref.bundle_id, "created": m["created"], "jax": env.get("jax", "?"),
            "median_ns": timing.median_ns, "inputs_bytes": _input_bytes(m), "description": m["description"]}


def bundle_table(rows: list[dict]) -> str:
    return table(["BUNDLE", "ID", "CREATED", "JAX", "REF TIME", "INPUTS", "DESCRIPTION"],
                 [[r["ref"], r["bundle_id"][7:19], r["created"][:19], r["jax"], human_ns(r["median_ns"]),
                   human_bytes(r["inputs_bytes"]), r["description"][:40]] for r in rows])


def bundle_data(b: Bundle, runs: list[dict]) -> dict:
    return {"ref": ref_data(b.ref), "manifest": b.manifest, "runs": [run_data(r) for r in runs]}


def describe_bundle(b: Bundle, runs: list[dict]) -> str:
    m = b.manifest
    env = m["environment"]
    fn = m["function"]
    timing = TimingSummary.of(m["reference"]["timing"]["samples_ns"])
    lines = [
        f"{b.ref}  {b.ref.bundle_id}",
        f"  url:          {b.ref.url}",
        f"  created:      {m['created']} by reprobundle {m['tool']['version']}",
    ]
    if m["description"]:
        lines.append(f"  description:  {m['description']}")
    if m["labels"]:
        lines.append("  labels:       " + ", ".join(f"{k}={v}" for k, v in sorted(m["labels"].items())))
    lines += [
        f"  function:     {fn['fields']['fun_name']} ({fn['kind']}, platforms {', '.join(fn['fields']['platforms'])}, "
        f"calling convention {fn['fields']['calling_convention_version']})",
    ]
    inputs, outputs = trees.leaves_of(m, "inputs"), trees.leaves_of(m, "outputs")
    lines.append("  inputs:       " + trees.summary(inputs, human_bytes))
    lines += trees.render(inputs, human_bytes)
    static = fn.get("static") or []
    if static:
        lines.append(f"  static:       {len(static)} value{'s' if len(static) != 1 else ''} baked into the export")
        lines += [f"    {v['path']} = {v['repr'][:60]}" for v in static[:trees.MAX_LINES]]
        if len(static) > trees.MAX_LINES:
            lines.append(f"    ... and {len(static) - trees.MAX_LINES} more (show --json lists them all)")
    lines.append("  outputs:      " + trees.summary(outputs, human_bytes))
    lines += trees.render(outputs, human_bytes)
    lines += [
        f"  reference:    median {human_ns(timing.median_ns)} (IQR {human_ns(timing.iqr_ns)}, n={timing.n}) "
        f"via {m['reference']['route']}",
        f"  environment:  jax {env.get('jax', '?')}, jaxlib {env.get('jaxlib', '?')}, python {env.get('python', '?')}, "
        f"{env.get('platform', '?')} ({env.get('cpu_model', '?')})",
        "  artifacts:    " + ", ".join(f"{k} ({human_bytes(v['blob']['size'])})" for k, v in sorted(m["artifacts"].items())),
    ]
    if runs:
        lines.append(f"  runs:         {len(runs)}")
        for r in runs[-10:]:
            lines.append(f"    {r['created'][:19]}  jax {r['environment'].get('jax', r['requested'])}: {r['status']}")
    return "\n".join(lines)


def run_data(run: dict) -> dict:
    timing = TimingSummary.of((run.get("timing") or {}).get("samples_ns") or [])
    return {"run_id": run["run_id"], "bundle": run["bundle"], "requested": run["requested"],
            "jax": run["environment"].get("jax"), "status": run["status"], "reason": run["reason"],
            "route": run.get("route"), "median_ns": timing.median_ns, "iqr_ns": timing.iqr_ns, "n": timing.n,
            "check": run.get("check"), "attempts": run.get("attempts", [])}


def describe_runs(b: Bundle, runs: list[dict]) -> str:
    ref_samples = b.manifest["reference"]["timing"]["samples_ns"]
    ref_timing = TimingSummary.of(ref_samples)
    ref_env = b.manifest["environment"]
    rows = [["reference", ref_env.get("jax", "?"), "ok", b.manifest["reference"]["route"],
             human_ns(ref_timing.median_ns), human_ns(ref_timing.iqr_ns), "1.00x", "", "", ""]]
    notes = []
    caveat_noted = False
    for r in runs:
        samples = (r.get("timing") or {}).get("samples_ns") or []
        t = TimingSummary.of(samples)
        resized = (r.get("labels") or {}).get("shape")  # replay --shape: other sizes than the reference's
        verdict = timing_verdict(b.manifest["reference"]["timing"], r["timing"]) if samples and not resized else None
        check = r.get("check") or {}
        rows.append([
            r["requested"], r["environment"].get("jax", "?"), r["status"], r.get("route") or "-",
            human_ns(t.median_ns), human_ns(t.iqr_ns),
            f"{verdict['ratio']:.2f}x" if verdict else "-",
            f"{verdict['verdict']} (p={verdict['p_value']:.1g})" if verdict else "-",
            f"{check['max_abs_err']:.3g}" if isinstance(check.get("max_abs_err"), (int, float)) else "-",
            ("yes" if check.get("bit_identical") else "no") if check else "-",
        ])
        if r["status"] != "ok" or resized:
            notes.append(f"jax {r['requested']}: {r['status']}: {r['reason']}")
        if verdict and verdict["caveat"] and not caveat_noted:
            notes.append(f"verdicts against the reference: {verdict['caveat']}")
            caveat_noted = True
    text = f"{b.ref}  ({b.manifest['function']['fields']['fun_name']})\n" + table(
        ["JAX", "VERSION", "STATUS", "ROUTE", "MEDIAN", "IQR", "VS REF", "VERDICT", "MAX ABS ERR", "BIT-EXACT"], rows)
    if notes:
        text += "\n" + "\n".join(notes)
    return text


def env_data(e) -> dict:
    return {"jax": e.jax_version, "python": e.python_version, "path": str(e.path) if e.path else None,
            "created": e.created, "bytes": e.size_bytes}


def env_table(found) -> str:
    return table(["JAX", "PYTHON", "CREATED", "SIZE", "PATH"],
                 [[e.jax_version, e.python_version, (e.created or "")[:19],
                   human_bytes(e.size_bytes) if e.size_bytes is not None else "-", str(e.path)] for e in found])
