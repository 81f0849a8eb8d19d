"""Text for the sharing commands: transfers, the bug-report snippet, gc and cache summaries, size warnings."""

from __future__ import annotations

import time
from typing import Callable

from ..bundle import transfer
from ..bundle.cache import CACHE_MAX_ENV
from ..bundle.registry import Bundle
from ..text import clean
from ..units import human_bytes, human_duration, human_ns

GITHUB_ATTACHMENT_LIMIT = 25_000_000  # bytes; GitHub refuses larger issue attachments ("25 MB")


def transfer_text(result: transfer.TransferResult, verb: str = "copied") -> str:
    d = result.data()
    if result.outcome == "present":
        head = f"{result.source} is already in {result.ref.store_url} as {result.ref}: nothing published"
    elif result.outcome == "kept":
        head = f"{verb} {result.source} to {result.ref.store_url} as {result.ref} (version kept)"
    else:
        head = (f"{verb} {result.source} to {result.ref.store_url} as {result.ref} "
                f"(version {result.source.version} is taken there)")
    what = f"{d['blobs_sent']} blobs" + (" and the manifest" if result.outcome != "present" else "")
    runs = ""
    if d["runs_copied"] or d["runs_present"]:
        runs = f"\n  runs: {d['runs_copied']} copied, {d['runs_present']} already there"
    if d["answers_copied"]:
        runs += f"; answers: {d['answers_copied']} copied, foreign there (shown, never reused or reported)"
    return (f"{head}\n"
            f"  sent {human_bytes(d['bytes_sent'])} ({what}), skipped {d['blobs_skipped']} blobs "
            f"({human_bytes(d['bytes_skipped'])}) already there, in {d['seconds']:.1f} s{runs}\n"
            f"  {result.ref.url}")


def reproduce_lines(rep: dict) -> list[tuple[str, list[str]]]:
    """The Reproduce block as (caption, shell lines) pairs, the same in every rendering: where the bundle is, the
    exact replay command, and what a reader with nothing installed runs."""
    parts: list[tuple[str, list[str]]] = []
    replay = ([rep["install"]] if rep.get("install") else []) + [rep["command"]]
    caption = ("With reprobundle, the command that made this report" if rep.get("context", "report") == "report"
               else "With reprobundle, which times the versions together and compares them")
    if not rep.get("install"):
        caption += " (install reprobundle from its source: this copy did not come from a package index)"
    parts.append((caption + ":", replay))
    if rep.get("nightlies"):
        parts.append(("The JAX nightlies it replays, installed by hand (one environment each):", rep["nightlies"]))
    if rep.get("standalone"):
        parts.append(("With nothing but Python: the zip replays itself on the JAX of the interpreter that runs it "
                      "(one version per environment; its first line says what it checks: what the stored investigation "
                      "found where there is one, else the outputs against the packed ones):",
                      rep["standalone"]))
    return parts


def where_text(rep: dict) -> str:
    """Where the bundle is, in words: a bucket URL and its public https form, or the zip to attach, with the command
    that writes it when it is not written yet (a bundle of a local store)."""
    if rep.get("attach"):
        made = f"write it with `{rep['export_command']}`, then " if rep.get("export_command") else ""
        return f"{made}attach {rep['attach']} to the issue (every command below runs in the folder it is saved in)"
    text = rep["url"]
    if rep.get("https_url"):
        text += f" (public https form: {rep['https_url']})"
    return text


def reproduce_markdown(rep: dict, heading: str = "#### Reproduce", attached: bool = False) -> str:
    """The Reproduce block in Markdown; `attached`: as the reader of an issue sees it, the zip already attached (no
    warning, no export command: the reporter's to-do)."""
    lines = [heading, ""] if heading else []
    if rep.get("warning") and not attached:
        lines += [f"> **Not shareable yet:** {rep['warning']}", ""]
    if rep.get("attach") and attached:
        lines.append(f"**Bundle:** `{rep['attach']}`, attached; the commands run in the folder it is saved in.")
    elif rep.get("attach"):
        lines.append(f"**Bundle:** attach `{rep['attach']}` to the issue"
                     + (f" (written by `{rep['export_command']}`)" if rep.get("export_command") else "")
                     + "; the commands run in the folder it is saved in.")
    else:
        where = f"`{rep['url']}`" + (f" ([https]({rep['https_url']}))" if rep.get("https_url") else "")
        lines.append(f"**Bundle:** {where}")
    for caption, commands in reproduce_lines(rep):
        lines += ["", caption, "", "```sh", *commands, "```"]
    return "\n".join(lines)


def reproduce_text(rep: dict, brief: bool = False) -> list[str]:
    """The Reproduce block for a terminal; `brief`: where the bundle is and the replay command only (the report
    files carry the rest)."""
    if brief:
        return [f"Reproduce: {rep['command']}", f"  bundle: {where_text(rep)}"]
    lines = ["Reproduce:", f"  bundle:  {where_text(rep)}"]
    if rep.get("warning"):
        lines.append(f"  warning: {rep['warning']}")
    for caption, commands in reproduce_lines(rep):
        lines += [f"  {caption}"] + [f"    {c}" for c in commands]
    return lines


def with_snippet(info: dict) -> dict:
    """A bundle's share info (bundle/sharing.share_info) with its Markdown snippet for a bug report: what `url`
    and api.share_info return."""
    return {**info, "markdown": markdown_snippet(info)}


def markdown_snippet(info: dict) -> str:
    env = info["environment"]
    captured = ", ".join(filter(None, [
        f"jax {env.get('jax') or '?'}", f"jaxlib {env.get('jaxlib') or '?'}", f"Python {env.get('python') or '?'}",
        f"backend {env.get('platform') or '?'}" + (f" ({', '.join(env['devices'])})" if env.get("devices") else ""),
        env.get("os"), env.get("cpu_model"),
    ]))
    median = info["reference_median_ns"]
    lines = [f"**Reproducer:** reprobundle bundle `{info['bundle']}` (id `{info['bundle_id'][:19]}`)", ""]
    if info["description"]:
        lines += [f"> {info['description']}", ""]
    lines += [
        f"- **Function:** `{info['function']}`",
        "- **Inputs:** " + (", ".join(f"`{i}`" for i in info["inputs"]) or "none"),
        "- **Outputs:** " + (", ".join(f"`{o}`" for o in info["outputs"]) or "none"),
        f"- **Captured on:** {captured}",
        f"- **Reference time:** median {human_ns(median)} over {info['reference_n']} calls",
        "",
        reproduce_markdown(info["reproduce"], heading="**Reproduce**"),
    ]
    return "\n".join(lines)


def share_text(info: dict) -> str:
    lines = [f"{info['bundle']}  {info['bundle_id']}", f"  url:      {info['url']}"]
    if info.get("https_url"):
        lines.append(f"  https:    {info['https_url']}")
    if info.get("console_url"):
        lines.append(f"  console:  {info['console_url']}")
    if info.get("file_url"):
        lines.append(f"  file:     {info['file_url']}")
    lines += [f"  replay:   {info['replay_command']}", "", "Paste into the issue:", "", info["markdown"]]
    return "\n".join(lines)


def gc_text(data: dict) -> str:
    lines = [f"  {b['digest']}  {human_bytes(b['bytes'])}" for b in data["blobs"][:50]]
    if data["count"] > 50:
        lines.append(f"  ... and {data['count'] - 50} more")
    total = f"{data['count']} unreferenced blobs ({human_bytes(data['bytes'])}) in {data['store']}"
    if data["dry_run"]:
        tail = f"would remove {total}" + ("; rerun with --delete to remove them" if data["count"] else "")
    else:
        tail = f"removed {total}"
    return "\n".join(lines + [tail] + gc_kept_lines(data))


def gc_kept_lines(data: dict) -> list[str]:
    """What gc kept although no record references it, and why; the records it could not read."""
    kept = data.get("kept") or {}
    lines = []
    if kept.get("leased"):
        lines.append(f"kept {kept['leased']} blobs held by a running pack, replay or push")
    if kept.get("recent"):
        lines.append(f"kept {kept['recent']} blobs used within the grace period ({human_duration(data['grace_s'])}); "
                     "--grace 0 removes them when nothing else writes to the store")
    if kept.get("unknown_age"):
        lines.append(f"kept {kept['unknown_age']} blobs whose age this store cannot tell; --grace 0 removes them when "
                     "nothing else writes to the store")
    for item in data.get("unreadable") or []:
        lines.append(f"warning: could not read {clean(item['key'], 200)}: {clean(item['reason'], 200)}")
    if kept.get("unaccounted"):
        lines.append(f"kept {kept['unaccounted']} unreferenced blobs: a record gc could not read may reference any "
                     "of them; repair or remove it, then run gc again")
    return lines


def cache_text(data: dict) -> str:
    if "removed_blobs" in data:
        return f"removed {data['removed_blobs']} blobs ({human_bytes(data['removed_bytes'])}) from {data['root']}"
    return (f"{data['root']}: {data['blobs']} blobs, {human_bytes(data['bytes'])} of "
            f"{human_bytes(data['max_bytes'])} ({CACHE_MAX_ENV})")


def export_size_warning(bundle: Bundle, size: int, limit: int = GITHUB_ATTACHMENT_LIMIT) -> str | None:
    """A warning when an exported zip is too big to attach to a GitHub issue, with what would make it fit."""
    if size <= limit:
        return None
    m = bundle.manifest
    inputs = sum(l["blob"]["size"] for l in m["inputs"]["leaves"] if "blob" in l)
    dump = (m.get("artifacts") or {}).get("xla_dump")
    ways = []
    if inputs:
        ways.append(f"pack with --synthetic-inputs (the stored inputs are {human_bytes(inputs)})")
    if dump:
        ways.append(f"pack with --no-dump (the XLA dump folder is {human_bytes(dump['blob']['size'])})")
    ways.append("or share it through a store instead: `reprobundle push REF --to gs://BUCKET/PREFIX`, then "
                "`reprobundle url`")
    return (f"warning: the zip is {human_bytes(size)}, over GitHub's 25 MB attachment limit; to fit: "
            + "; ".join(ways))


def byte_progress(label: str, echo: Callable[[str], None], *, every_s: float = 1.0) -> transfer.Progress:
    """A plain-text progress line (at most one per `every_s` seconds, and the last one) for transfer.copy_bundle."""

    state = {"last": 0.0, "shown_done": False}

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if (now - state["last"] < every_s and not finished) or (finished and state["shown_done"]):
            return
        state["last"] = now
        state["shown_done"] = finished
        pct = 100.0 * done / total if total else 100.0
        echo(f"{label}: {human_bytes(done)} / {human_bytes(total)} ({pct:.0f}%)")

    return show
