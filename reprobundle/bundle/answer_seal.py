"""Whose an answer record is (docs/architecture.md, "Answers: own and foreign").

A record is data from whoever wrote the store, and a stranger can write any field it carries: `reuse.origin`, its
`created`, a seal. What proves a record ours is what a stranger does not have: a key of 32 random bytes kept on this
machine, outside every store (config.answer_key_file), made on the first answer stored. `Registry.put_answer` seals
each record it writes: the sha256 of each run record it rests on, as stored here, and an HMAC-SHA256 under that key
of the whole record with those digests (its canonical msgpack, manifest.encode). A record is own where its seal
checks under the key here and every run it sealed is still in the store with those bytes; any other record is
foreign (a copy: push, pull and copy drop seals; a stranger's, whatever it claims; one altered since; another
machine's; one of a reprobundle before 2026-12-06): `show` says which and why, nothing reuses or reports it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any, Mapping

from ..config import answer_key_file
from ..errors import FormatError, StoreError, space_for
from ..worker.protocol import NO_SPACE_ERRNOS
from . import manifest as mf

SEAL = "seal"
KEY_BYTES = 32
_DOMAIN = b"reprobundle answer seal 1\n"  # what the MAC is of: never another use of the same key
NO_SEAL = "no seal of this store's: a copy (push, pull and copy bring records unsealed), or a stranger's record"


def machine_key() -> bytes | None:
    """This machine's answer key, None where none is kept yet (nothing here has sealed a record)."""
    return _read_key(answer_key_file())


def sealing_key() -> bytes:
    """This machine's answer key, made where missing: written to a temporary file of mode 0600 and linked into place,
    so of two processes making it at once both use the one that won."""
    path = answer_key_file()
    key = _read_key(path)
    if key is not None:
        return key
    with space_for(path.parent, what="this machine's answer key"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _link_new_key(path)
        except OSError as e:
            if e.errno in NO_SPACE_ERRNOS:
                raise  # space_for's: the disk is full
            raise _key_error(path, f"cannot write it ({e.strerror})") from None
    made = _read_key(path)
    if made is None:
        raise _key_error(path, "it was removed as it was made")
    return made


def _link_new_key(path: Path) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(KEY_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temp, path)
        except FileExistsError:
            pass  # another process made it first: its key is this machine's
    finally:
        temp.unlink(missing_ok=True)


def _read_key(path: Path) -> bytes | None:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise _key_error(path, f"cannot read it ({getattr(e, 'strerror', None) or 'not text'})") from None
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise _key_error(path, "it holds no key reprobundle made")
    return key


def _key_error(path: Path, problem: str) -> StoreError:
    from ..text import clean

    return StoreError(f"this machine's answer key {clean(str(path), 300)}: {problem}",
                      hint="set REPROBUNDLE_ANSWER_KEY to a file this user can write, or remove the file (a new key is "
                           "made; the answers the old one sealed become foreign)")


def key_id(key: bytes) -> str:
    """A name for the key that shows nothing of it: which key sealed a record, for `show`."""
    return hashlib.sha256(_DOMAIN + key).hexdigest()[:16]


def sealed(record: Mapping[str, Any], runs: Mapping[str, str | None], key: bytes) -> dict:
    """`record` with its seal: the key's name, `runs` (each run record's key in the store: its sha256 as stored,
    None where the store held none) and the MAC of both with the rest of the record."""
    body = {k: v for k, v in record.items() if k != SEAL}
    seal = {"key": key_id(key), "runs": dict(runs)}
    return {**body, SEAL: {**seal, "mac": _mac(key, {**body, SEAL: seal})}}


def _mac(key: bytes, body: Mapping[str, Any]) -> str:
    return hmac.new(key, _DOMAIN + mf.encode(body), hashlib.sha256).hexdigest()


def seal_problem(record: Mapping[str, Any], key: bytes | None) -> str | None:
    """Why `record`'s seal does not make it this machine's (None: it does, but for its runs: `run_problem`)."""
    seal = record.get(SEAL)
    if not isinstance(seal, dict) or not isinstance(seal.get("mac"), str) or not isinstance(seal.get("runs"), dict):
        return NO_SEAL
    if key is None or seal.get("key") != key_id(key):
        return "sealed with another key than this machine's (another machine's, or a stranger's)"
    body = {**record, SEAL: {k: v for k, v in seal.items() if k != "mac"}}
    try:
        expected = _mac(key, body)
    except (FormatError, TypeError):
        return "its seal cannot be checked"
    return None if hmac.compare_digest(seal["mac"], expected) else "altered since this machine sealed it"


def sealed_runs(record: Mapping[str, Any]) -> dict[str, str | None]:
    """The run records a seal names (their keys in the store) with their digests (None: not stored when sealed);
    {} where it has none."""
    seal = record.get(SEAL)
    runs = seal.get("runs") if isinstance(seal, dict) else None
    return {str(k): None if v is None else str(v) for k, v in runs.items()} if isinstance(runs, dict) else {}


def run_problem(record: Mapping[str, Any], digests: Mapping[str, str | None]) -> str | None:
    """Why the runs a sealed record rests on are not as sealed here (`digests`: each run key's sha256 as stored now,
    None where it is not), or None. A run the store did not hold when the record was sealed must still be missing:
    one that appeared since is nobody's the record can vouch for."""
    for run_key, digest in sorted(sealed_runs(record).items()):
        run_id = run_key.rsplit("/", 1)[-1].removesuffix(".msgpack")
        now = digests.get(run_key)
        if now == digest:
            continue
        return (f"its run {run_id} is not in this store" if now is None else
                f"its run {run_id} appeared after it was sealed" if digest is None else
                f"its run {run_id} changed since it was sealed")
    return None


def unsealed(record: Mapping[str, Any]) -> dict:
    """`record` without its seal: what a transfer stores, a foreign record wherever it goes."""
    return {k: v for k, v in record.items() if k != SEAL}
