"""What goes into a bug report of a bundle (`reprobundle issue`), as plain data: the title, what the stored runs
showed, the environment the bundle recorded (what `jax.print_environment_info()` prints), the reproducer script
when it fits in an issue (else the command that makes it), the HLO and `run_hlo_module` line for XLA's tracker, and
the Reproduce block. render/issue.py lays it out as Markdown. Nothing runs: only the bundle and its stored runs
are read.

The store records no bisection (bisect stores its probes' runs, not its answer), so the first bad release and
the layer are not part of the report; the tracker defaults to XLA for a piece minimize reduced (the frozen module
shows the difference: the compiler's), else to JAX.
"""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import quote

from ..bundle.registry import Bundle, Registry, open_ref
from ..bundle.reproducer import (
    NoScriptError,
    ScriptTooLargeError,
    difference,
    file_stem,
    hlo_texts,
    run_hlo_module_line,
    stored_runs,
)
from ..bundle.sharing import reproduce_info
from ..config import default_store_url
from ..errors import UsageError
from ..run.contenders import concrete_versions, variant_args
from ..text import clean
from .reproducer import script_of

TRACKERS = {"jax": "https://github.com/jax-ml/jax/issues/new", "xla": "https://github.com/openxla/xla/issues/new"}
BODY_LIMIT = 65_000  # characters: GitHub refuses an issue body over 65,536
ENVIRONMENT_KEYS = (("jax", "jax"), ("jaxlib", "jaxlib"), ("numpy", "numpy"), ("ml_dtypes", "ml_dtypes"),
                    ("Python", "python_full"), ("OS", "os"), ("machine", "machine"), ("backend", "backend"),
                    ("CPU", "cpu_model"), ("CPU count", "cpu_count"))


def store_args(registry: Registry) -> list[str]:
    """`--store URL` where the bundle is not in the default store (or a zip: its path is the ref)."""
    import os

    if registry.store.capabilities.single_file or os.path.abspath(registry.url) == os.path.abspath(default_store_url()):
        return []
    return ["--store", registry.url]


def environment_rows(bundle: Bundle) -> list[tuple[str, str]]:
    """(name, value) of what `jax.print_environment_info()` prints, as the bundle recorded it (free-form data)."""
    env: Any = bundle.manifest.get("environment") or {}
    rows = [(name, str(env[key])) for name, key in ENVIRONMENT_KEYS if env.get(key) not in (None, "")]
    devices = env.get("devices")
    if isinstance(devices, list) and devices:
        kinds = sorted({str(d.get("kind") or d.get("platform")) for d in devices if isinstance(d, dict)})
        rows.append(("devices", f"{len(devices)} x {', '.join(kinds)}"))
    flags = (env.get("env_vars") or {}).get("XLA_FLAGS") if isinstance(env.get("env_vars"), dict) else None
    rows.append(("XLA_FLAGS", str(flags or "(not set)")))
    return rows


def title(bundle: Bundle, diff) -> str:
    """One line: the backend, what the piece is, what it does, under which setting, on which jax."""
    m = bundle.manifest
    env: Any = m.get("environment") or {}
    ops = [part.split(" (")[0] for part in str((m.get("labels") or {}).get("minimized-ops") or "").split("; ") if part]
    subject = (f"{len(ops)} ops ({', '.join(ops[:4])})" if ops
               else f"`{m['function'].get('fields', {}).get('fun_name', 'function')}`")
    what = _what(diff, bool((m.get("labels") or {}).get("minimized-property")))
    setting = " with " + " ".join(f"{k}={v}" for k, v in diff.show.items()) if diff.show else ""
    releases = list(dict.fromkeys(diff.releases))
    jax = f"jax {releases[-1]} vs {releases[0]}" if len(releases) >= 2 else f"jax {env.get('jax') or '?'}"
    return clean(f"[{env.get('backend') or '?'}] {subject} {what}{setting} ({jax})", 160)


def _what(diff, minimized: bool) -> str:
    """What the title says the bundle does: what minimize kept it for, else what its stored runs showed."""
    if not minimized:
        if not diff.statuses:
            return "(no replay of it stored yet: nothing seen to report)"
        if "mismatch" not in diff.statuses and not set(diff.statuses) & {"error", "crashed", "timeout"}:
            return "replays with outputs within tolerance"
    if diff.expect == "outputs" and diff.bits:
        return "gives other output bits"
    return {"outputs": "gives outputs beyond float tolerance", "error": "fails to compile or run",
            "slower": "runs slower"}.get(diff.expect, "behaves differently")


def _script(registry: Registry, bundle: Bundle, ref: str, stem: str) -> dict:
    """The script when it fits in an issue, else the command that makes it (or why none can)."""
    store = " ".join(shlex.quote(a) for a in store_args(registry))
    command = f"reprobundle script {shlex.quote(ref)} -o {stem}.py" + (f" {store}" if store else "")
    try:
        text = script_of(registry, bundle, f"{stem}.py")
    except (ScriptTooLargeError, NoScriptError) as e:
        return {"text": None, "name": f"{stem}.py", "command": None, "why": f"{e.message}; {e.hint}"}
    return {"text": text, "name": f"{stem}.py", "command": command, "bytes": len(text.encode()), "why": None}


def _reproduce(registry: Registry, bundle: Bundle, runs: list[dict]) -> dict:
    """The Reproduce block: the stored replay's versions and variants, else the JAX the bundle was packed with."""
    versions = concrete_versions(runs) if runs else []
    extra = variant_args(runs, concrete_versions) if runs else []
    if not versions and not extra:
        versions = [str((bundle.manifest.get("environment") or {}).get("jax") or "installed")]
    return reproduce_info(registry, bundle, versions, extra_args=extra, context="snippet")


def issue_data(ref: str, *, store: str | None = None, tracker: str | None = None) -> dict:
    """The issue of `ref` as plain data (render/issue.py makes the Markdown); `tracker` jax or xla, else chosen."""
    if tracker not in (None, *TRACKERS):
        raise UsageError(f"unknown tracker {clean(tracker, 40)!r}", hint="--tracker jax or --tracker xla")
    registry, bundle = open_ref(ref, store)
    runs = stored_runs(registry, bundle)
    diff = difference(bundle, runs)
    labels = bundle.manifest.get("labels") or {}
    chosen = tracker or ("xla" if labels.get("minimized-from") else "jax")
    stem = file_stem(bundle)
    heading = title(bundle, diff)
    hlo = hlo_texts(registry, bundle)
    return {"bundle": str(bundle.ref), "bundle_id": bundle.ref.bundle_id, "tracker": chosen, "title": heading,
            "open_url": f"{TRACKERS[chosen]}?title={quote(heading, safe='')}",
            "description": str(bundle.manifest.get("description") or ""),
            "minimized_from": labels.get("minimized-from"), "expect": diff.expect, "show": diff.show,
            "seen": diff.seen, "environment": environment_rows(bundle), "script": _script(registry, bundle, ref, stem),
            "hlo": {"before": hlo.get("before"), "after": hlo.get("after"), "folder": f"{stem}-hlo",
                    "command": run_hlo_module_line(bundle, diff, f"{stem}.{next(iter(hlo))}.hlo") if hlo else None,
                    "files_command": " ".join(["reprobundle", "script", shlex.quote(ref), "--hlo", f"{stem}-hlo",
                                               *(shlex.quote(a) for a in store_args(registry))])},
            "reproduce": _reproduce(registry, bundle, runs), "body_limit": BODY_LIMIT}
