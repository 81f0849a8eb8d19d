"""A JAX nightly index on 127.0.0.1, built from real release wheels re-labelled as nightlies of given dates.

Each day's jax and jaxlib wheels are real release wheels (from PyPI, `pip download --no-deps`) with their metadata
rewritten consistently, as a nightly build writes it: the version in the file name, the dist-info folder, METADATA
(and the jax wheel's Requires-Dist on jaxlib), the version module (`_release_version`, and the `_git_hash` that
JAX's nightly builds record), and RECORD's hashes and sizes. The server also answers what the XLA commit lookup
reads (`/jax-source/<commit>/third_party/xla/revision.bzl`). Re-labelled wheels are cached under
~/.cache/reprobundle-tests, so a rerun builds nothing.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CACHE = Path.home() / ".cache" / "reprobundle-tests"


def fake_commit(label: str) -> str:
    """A stable 40-hex commit id for a label (the tests' stand-in for the commit a nightly was built from)."""
    return hashlib.sha1(label.encode()).hexdigest()


def release_wheel(project: str, version: str) -> Path:
    """The real wheel of `project==version` for this Python (downloaded once into the cache)."""
    folder = CACHE / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"{project}-{version}-*.whl"
    found = [p for p in folder.glob(pattern) if project != "jaxlib" or f"cp3{sys.version_info[1]}-" in p.name]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", str(folder), f"{project}=={version}"], check=True, capture_output=True, text=True)
        found = [p for p in folder.glob(pattern) if project != "jaxlib" or f"cp3{sys.version_info[1]}-" in p.name]
    return found[0]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _rewrite_text(name: str, text: str, old: str, new: str, commit: str, project: str) -> str:
    if name.endswith(".dist-info/METADATA"):
        text = re.sub(rf"^Version: {re.escape(old)}$", f"Version: {new}", text, flags=re.MULTILINE)
        # jax pins its jaxlib (jaxlib<=OLD,>=MIN): the nightly pins the same day's jaxlib
        text = re.sub(r"^Requires-Dist: jaxlib\b[^;\n]*", f"Requires-Dist: jaxlib<={new},>={new}", text,
                      flags=re.MULTILINE)
    elif name == f"{project}/version.py":
        text = re.sub(r"^_release_version: .*$", f"_release_version: str = {new!r}", text, flags=re.MULTILINE)
        text = re.sub(r"^_git_hash: .*$", f"_git_hash: str = {commit!r}", text, flags=re.MULTILINE)
    return text


def relabel(wheel: Path, new_version: str, commit: str, out_dir: Path) -> Path:
    """`wheel` as the nightly `new_version` built from `commit` (written once into `out_dir`)."""
    project, old = wheel.name.split("-")[:2]
    target = out_dir / wheel.name.replace(f"{project}-{old}-", f"{project}-{new_version}-", 1)
    if target.exists():
        return target
    old_info, new_info = f"{project}-{old}.dist-info/", f"{project}-{new_version}.dist-info/"
    tmp = target.with_suffix(".tmp")
    records = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        record_name = None
        for info in src.infolist():
            name = new_info + info.filename[len(old_info):] if info.filename.startswith(old_info) else info.filename
            if name.endswith(".dist-info/RECORD"):
                record_name = name
                continue
            data = src.read(info)
            if name.endswith((".dist-info/METADATA", f"{project}/version.py")):
                data = _rewrite_text(name, data.decode(), old, new_version, commit, project).encode()
            entry = zipfile.ZipInfo(name, info.date_time)
            entry.external_attr, entry.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
            dst.writestr(entry, data, compresslevel=1)
            records.append((name, _record_hash(data), str(len(data))))
        assert record_name is not None
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(records + [(record_name, "", "")])
        dst.writestr(record_name, out.getvalue())
    tmp.replace(target)
    return target


def build_index(root: Path, days: dict[str, tuple[str, bool, str]], wheel_cache: Path) -> dict[str, dict]:
    """A PEP 503 tree under `root` (simple/jax/, simple/jaxlib/, files/): `days` maps an ISO date to (the release
    whose wheels it re-labels, whether its jaxlib wheel is published, the label of the commit it is built from:
    two days of one label are one build). Returns per day {"version", "commit", "xla", "release"}."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    wheel_cache.mkdir(parents=True, exist_ok=True)
    listing: dict[str, list[str]] = {"jax": [], "jaxlib": []}
    made = {}
    for day, (release, with_jaxlib, label) in sorted(days.items()):
        version = f"0.11.0.dev{day.replace('-', '')}"
        commit, xla = fake_commit(f"jax@{label}"), fake_commit(f"xla@{label}")
        made[day] = {"version": version, "commit": commit, "xla": xla, "release": release}
        for project in ("jax", "jaxlib") if with_jaxlib else ("jax",):
            cache = wheel_cache / commit[:12]
            cache.mkdir(parents=True, exist_ok=True)
            built = relabel(release_wheel(project, release), version, commit, cache)
            shutil.copyfile(built, files / built.name)  # a copy: the cache stays the tests' own
            listing[project].append(built.name)
        source = root / "jax-source" / commit / "third_party" / "xla"
        source.mkdir(parents=True, exist_ok=True)
        (source / "revision.bzl").write_text(f'XLA_COMMIT = "{xla}"\nXLA_SHA256 = "0"\n')
    for project, names in listing.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{html.escape(n)}">{html.escape(n)}</a>\n' for n in names)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return made


class IndexServer:
    """`root` served over http on 127.0.0.1 (a thread); `url` is the simple index, `source` the jax source tree."""

    def __init__(self, root: Path) -> None:
        handler = partial(_QuietHandler, directory=str(root))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url, self.source = f"{base}/simple", f"{base}/jax-source"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass
