"""Content digests: every blob is named by the sha256 of its uncompressed bytes, written `sha256:<64 hex>`."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import BinaryIO

from ..errors import FormatError

ALGORITHM = "sha256"
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_CHUNK = 8 << 20


def digest_bytes(data: bytes | memoryview) -> str:
    return f"{ALGORITHM}:{hashlib.sha256(data).hexdigest()}"


def digest_stream(stream: BinaryIO, sink: BinaryIO | None = None) -> tuple[str, int]:
    """Digest and size of everything left in `stream`, read in chunks so memory stays flat; each chunk is also
    written to `sink` when one is given (copy and hash in one pass)."""
    h = hashlib.sha256()
    size = 0
    while chunk := stream.read(_CHUNK):
        h.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return f"{ALGORITHM}:{h.hexdigest()}", size


def digest_file(path: str | Path) -> tuple[str, int]:
    with open(path, "rb") as f:
        return f"{ALGORITHM}:{hashlib.file_digest(f, ALGORITHM).hexdigest()}", os.fstat(f.fileno()).st_size


def is_digest(text: str) -> bool:
    return bool(_DIGEST_RE.fullmatch(text))


def check_digest(text: str) -> str:
    if not isinstance(text, str) or not is_digest(text):
        raise FormatError(f"not a sha256 digest: {text!r}", hint="digests look like sha256:<64 lowercase hex>")
    return text


def hex_of(digest: str) -> str:
    return check_digest(digest).split(":", 1)[1]


def blob_key(digest: str) -> str:
    """Where a blob lives in every store: blobs/sha256/<2 hex>/<64 hex>."""
    h = hex_of(digest)
    return f"blobs/sha256/{h[:2]}/{h}"
