"""Rendering of `reprobundle capture`: the table of jitted computations a program ran, and what was captured."""

from __future__ import annotations

import os

from .listing import human_bytes, human_ns, table

TIMING_NOTE = ("times: each call was followed by block_until_ready (listing and --top only, so calls did not "
               "overlap as they do in a normal run); RUN is the call's time without compilation, COMPILE the "
               "trace + lowering + XLA compile of the calls that compiled; JAX's own eager operations are not "
               "listed")
_ARGS_WIDTH = 70


def _ns(value) -> str:
    return "-" if value is None else human_ns(value)


def _where(row: dict) -> str:
    if row.get("via"):
        return row["via"]
    location = row.get("location") or ""
    if not location:
        return ""
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def _short(text: str, width: int = _ARGS_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def sorted_rows(rows: list[dict]) -> list[dict]:
    """Most run time first (untimed rows by call count), then by name and signature."""
    return sorted(rows, key=lambda r: (-(r.get("total_ns") or 0), -r.get("calls", 0),
                                       r.get("display") or r["name"], r.get("signature", 0)))


def _status(row: dict) -> str:
    if row.get("captured"):
        return f"captured (call {row['capture_call']})"
    if row.get("failure"):
        return "not exportable"
    return row.get("note") or ""


def computations_table(rows: list[dict], *, timed: bool, limit: int | None = None) -> str:
    rows = sorted_rows(rows)[:limit] if limit else sorted_rows(rows)
    several_pids = len({r.get("pid") for r in rows}) > 1
    headers = ["FUNCTION", "JIT", "WHERE", "SIG", "CALLS" if timed else "CALLS SEEN"]
    if timed:
        headers += ["COMPILE", "TOTAL RUN", "MEDIAN RUN"]
    headers += ["ARGUMENTS", "NOTE"]
    if several_pids:
        headers.insert(0, "PID")
    body = []
    for r in rows:
        line = [r.get("display") or r["name"], r.get("jit_name", ""), _where(r),
                f"{r['signature']}/{r.get('nsignatures', r['signature'])}", str(r["calls"])]
        if timed:
            line += [_ns(r.get("compile_ns")), _ns(r.get("total_ns")), _ns(r.get("median_ns"))]
        line += [_short(r.get("arg_text", "")), _short(_status(r), 60)]
        if several_pids:
            line.insert(0, str(r.get("pid", "")))
        body.append(line)
    return table(headers, body)


def listing_text(result, *, limit: int | None = None) -> str:
    rows = result.computations
    head = f"{len(rows)} jitted computation{'s' if len(rows) != 1 else ''} (function, signature)"
    if result.command:
        head += f" ran in `{' '.join(result.command)}`"
    lines = [head + ":"]
    if rows:
        lines.append(computations_table(rows, timed=result.timed, limit=limit))
        if limit and len(rows) > limit:
            lines.append(f"... and {len(rows) - limit} more (--json lists them all)")
        if result.timed:
            lines.append(TIMING_NOTE)
    lines += _footer(result)
    return "\n".join(lines)


def replay_command(ref, store: str | None) -> str:
    return f"reprobundle replay {ref}" + (f" --store {store}" if store else "")


def capture_text(result) -> str:
    n = len(result.captures)
    where = f" from `{' '.join(result.command)}`" if result.command else ""
    lines = [f"captured {n} computation{'s' if n != 1 else ''}{where}:" if n else f"captured nothing{where}"]
    for c in result.captures:
        lines += _capture_lines(c)
    if result.captures:
        lines.append("replay:")
        lines += [f"  {replay_command(c['ref'], result.store)}" for c in result.captures]
        lines.append("  (add --jax VERSION, repeatable, to run and compare other JAX releases)")
    if result.failures:
        lines.append("not captured:")
        lines += [_failure_line(f) for f in result.failures]
    if result.computations and not result.captures:
        lines.append("seen:")
        lines.append(computations_table(result.computations, timed=result.timed, limit=20))
    lines += _footer(result)
    return "\n".join(lines)


def _capture_lines(c) -> list[str]:
    fn = c["function"]
    args = ", ".join(f"{a['name']}: {a['text']}" for a in c["args"])
    costs = c.get("costs") or {}
    lines = [f"  {c['ref']}  {c['ref'].bundle_id[:19]}  {fn.get('display') or fn['name']}  call {c['call']}"
             f" (signature {c['signature']})",
             f"    arguments: {_short(args, 100)}",
             f"    capture cost: export {costs.get('export_s', 0):.3f} s, "
             f"copy + write of {human_bytes(c.get('input_bytes', 0))} of arguments "
             f"{costs.get('copy_s', 0) + costs.get('write_s', 0):.3f} s; reference on jax {c['jax_version']}"]
    if c.get("note"):
        lines.append(f"    note: {c['note']}")
    return lines


def _failure_line(f) -> str:
    call = f", call {f['call']}" if f.get("call") else ""
    return f"  {f['function']} (signature {f['signature']}{call}): {f['reason']}"


def _footer(result) -> list[str]:
    lines = [f"warning: {p}" for p in result.problems]
    if result.exit_code is not None:
        status = "interrupted, " if result.interrupted else ""
        lines.append(f"program: {status}exit code {result.exit_code}")
    return lines


def capture_data(result) -> dict:
    from .listing import ref_data

    return {"command": result.command, "exit_code": result.exit_code, "interrupted": result.interrupted,
            "timed": result.timed, "timing_note": TIMING_NOTE if result.timed else None,
            "computations": sorted_rows(result.computations),
            "captures": [{**{k: v for k, v in c.items() if k != "ref"}, "ref": ref_data(c["ref"]),
                          "replay": replay_command(c["ref"], result.store)} for c in result.captures],
            "failures": result.failures, "problems": result.problems}
