"""Writing one GCS object: a single multipart request, or a resumable upload streamed over several requests; both
optionally create-only.

Create-only is the JSON API's `ifGenerationMatch=0` precondition: GCS creates the object only if the name has no
live object, checked atomically on the server, and answers 412 otherwise (GCSPreconditionFailed). So of N racing
writers exactly one wins; bundle versions are allocated and manifests published with it.
- Single request: checked when the request is handled.
- Resumable: the precondition is given when the session is started and checked when the upload is finalised (the
  last byte in). We also ask for the object before starting: that saves sending the bytes, and covers servers that
  check the precondition only on single-request uploads.
- A lost reply: the server acted but the connection broke before we heard, so the request is retried and the retry
  meets 412 on our own object. If any request of the upload was retried and the object holds exactly our bytes
  (same MD5), the write counts as ours.

Every upload is atomic for readers: GCS shows an object only once its upload is finalised; a resumable upload that
fails is cancelled (its session deleted), never left half-written.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path
from typing import Awaitable, Callable

from ..errors import StoreError
from .gcs_http import (
    GCSClient,
    GCSNotFound,
    GCSPreconditionFailed,
    Response,
    is_transient,
    recording_retries,
    with_retries,
)

CONTENT_TYPE = "application/octet-stream"
BOUNDARY = "==reprobundle-part=="
MiB = 1 << 20

Progress = Callable[[int], None]
ReadAt = Callable[[int, int], Awaitable[bytes | memoryview]]  # (offset, n) -> exactly n bytes of the value


def md5_b64(data) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def md5_b64_file(path: str | Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * MiB), b""):
            h.update(block)
    return base64.b64encode(h.digest()).decode()


def _precondition(create_only: bool) -> dict:
    return {"ifGenerationMatch": "0"} if create_only else {}


async def holds(client: GCSClient, bucket: str, name: str, md5: Callable[[], str]) -> bool:
    """Does the object hold exactly our bytes? Asked after a 412 answered a retried create-only upload."""
    try:
        meta = await client.get_json(client.object_url(bucket, name), {"fields": "md5Hash"})
    except Exception:
        return False
    stored = meta.get("md5Hash")
    return bool(stored) and stored == await asyncio.to_thread(md5)


async def upload_single(client: GCSClient, bucket: str, name: str, data: bytes | memoryview, *,
                        create_only: bool, generation: str | None = None) -> None:
    """The value in one multipart request (metadata part + bytes part). Raises GCSPreconditionFailed if create-only
    and the object exists, or `generation` is given and the object is no longer that generation (and is not our own
    lost write)."""
    if isinstance(data, memoryview) and not data.c_contiguous:
        data = data.tobytes()
    meta = json.dumps({"name": name})
    body = b"".join([
        f"--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
        f"--{BOUNDARY}\r\nContent-Type: {CONTENT_TYPE}\r\n\r\n".encode(),
        data,
        f"\r\n--{BOUNDARY}--\r\n".encode(),
    ])
    with recording_retries() as retried:
        try:
            await client.request(
                "POST", client.upload_url(bucket), what=f"upload of {name}",
                params={"uploadType": "multipart",
                        **({"ifGenerationMatch": generation} if generation else _precondition(create_only))},
                headers={"Content-Type": f'multipart/related; boundary="{BOUNDARY}"'}, data=body,
            )
        except GCSPreconditionFailed:
            conditional = create_only or bool(generation)
            if not (conditional and retried and await holds(client, bucket, name, lambda: md5_b64(data))):
                raise


def persisted_bytes(headers) -> int:
    """Bytes a resumable session holds, from a 308's Range header ('bytes=0-N'); 0 without one."""
    rng = headers.get("Range") or ""
    try:
        return int(rng.rsplit("-", 1)[1]) + 1 if "-" in rng else 0
    except ValueError:
        return 0


class NoProgress(StoreError):
    """The server confirmed no new bytes after a request; retried like a transient failure, then given up."""


class ResumableUpload:
    """One resumable upload, streamed: each request carries up to `chunk` bytes, read `block` bytes at a time (so
    memory stays small); after a failure it goes on from the last offset the server confirmed.

    `progress(n)` is called as bytes go out; each byte is counted once, even when a retry sends it again, and the
    last one only once the server has stored the object: progress reaching the total means "done".
    `ask_offset`: after a failure, ask the server how much it holds (what Google's clients do on GCS); otherwise
    resend from the last confirmed offset (fake-gcs-server finalises the object when asked)."""

    def __init__(self, client: GCSClient, bucket: str, name: str, size: int, read_at: ReadAt, *, create_only: bool,
                 md5: Callable[[], str], progress: Progress | None, chunk: int, block: int, ask_offset: bool,
                 destination: str) -> None:
        if size <= 0:
            raise ValueError("a resumable upload needs at least one byte")
        self.client, self.bucket, self.name, self.size, self.read_at = client, bucket, name, size, read_at
        self.create_only, self.md5, self.progress = create_only, md5, progress
        self.chunk, self.block, self.ask_offset = chunk, block, ask_offset
        self.destination = destination  # for messages: where the object goes (the store's URL)
        self.what = f"resumable upload of {name}"
        self.location = ""  # the session's URL, once started
        self.offset = 0  # bytes the server has confirmed
        self.reported = 0  # bytes reported to `progress`
        self.local_errors: list[BaseException] = []  # raised while producing a request body: never retried

    async def run(self) -> None:
        if self.create_only and await self._exists():
            raise GCSPreconditionFailed(412, "the object exists", self.client.object_url(self.bucket, self.name))
        with recording_retries() as retried:
            try:
                self.location = await self._start()
                while True:
                    response = await with_retries(self._step, self.client.policy, self.what, self._transient)
                    if response.status in (200, 201):
                        self._finished(response)
                        return
            except GCSPreconditionFailed:
                if not (self.create_only and retried and await holds(self.client, self.bucket, self.name, self.md5)):
                    raise
                self._sent_up_to(self.size)  # our own earlier attempt created it
            except BaseException:
                await self._cancel()
                raise

    async def _exists(self) -> bool:
        try:
            await self.client.get_json(self.client.object_url(self.bucket, self.name), {"fields": "name"})
            return True
        except GCSNotFound:
            return False

    async def _start(self) -> str:
        response = await self.client.request(
            "POST", self.client.upload_url(self.bucket), what=f"start of the {self.what}",
            params={"uploadType": "resumable", "name": self.name, **_precondition(self.create_only)},
            json={"name": self.name}, headers={"X-Upload-Content-Type": CONTENT_TYPE},
        )
        location = response.headers.get("Location")
        if not location:
            raise StoreError(f"GCS started no upload session for {self.name} in {self.destination}")
        return location

    async def _step(self, attempt: int) -> Response:
        """Move the upload forward by one request: 308 (more to send) or 200/201 (stored). A retry (attempt > 0)
        first asks the server where to go on from, where that is safe."""
        if attempt and self.ask_offset:
            response = await self.client.send(
                "POST", self.location, allow_redirects=False,
                headers={"Content-Range": f"bytes */{self.size}", "Content-Length": "0"},
            )
            if response.status in (200, 201):  # it had every byte: only the reply to our last request was lost
                return response
            self._confirmed(response)
        end = min(self.offset + self.chunk, self.size)
        self.local_errors.clear()
        try:
            response = await self.client.send(
                "POST", self.location, data=self._body(self.offset, end), allow_redirects=False,
                headers={"Content-Range": f"bytes {self.offset}-{end - 1}/{self.size}",
                         "Content-Length": str(end - self.offset), "Content-Type": CONTENT_TYPE},
            )
        except Exception:
            if self.local_errors:  # aiohttp reports them as connection errors; raise them as they are
                raise self.local_errors[0] from None
            raise
        if response.status not in (200, 201):
            before = self.offset
            self._confirmed(response)
            if self.offset <= before:
                raise NoProgress(f"GCS accepted no bytes of {self.name} at offset {before}; giving up")
        return response

    def _transient(self, e: BaseException, attempt: int) -> bool:
        # Not the one-time retry of an expired token: the session URL is the upload's authority.
        return not self.local_errors and (isinstance(e, NoProgress) or is_transient(e, 1))

    def _confirmed(self, response: Response) -> None:
        if response.status != 308:
            raise StoreError(f"unexpected HTTP {response.status} during a resumable upload of {self.name} "
                             f"to {self.destination}")
        self.offset = persisted_bytes(response.headers)

    async def _body(self, start: int, end: int):
        pos = start
        try:
            while pos < end:
                block = await self.read_at(pos, min(self.block, end - pos))
                yield block  # resumed once aiohttp has handed the block to the socket
                pos += len(block)
                self._sent_up_to(min(pos, self.size - 1))
        except GeneratorExit:
            raise
        except BaseException as e:  # reading the value or the progress callback failed
            self.local_errors.append(e)
            raise

    def _sent_up_to(self, pos: int) -> None:
        if self.progress and pos > self.reported:
            self.progress(pos - self.reported)
            self.reported = pos

    def _finished(self, response: Response) -> None:
        out = json.loads(response.body) if response.body else {}
        if int(out.get("size", self.size)) != self.size:
            raise StoreError(f"{self.name}: GCS stored {out.get('size')} bytes of {self.size}")
        self._sent_up_to(self.size)

    async def _cancel(self) -> None:
        """Delete the session so nothing is left behind (GCS would expire it after a week anyway)."""
        if not self.location:
            return
        try:
            await self.client.request("DELETE", self.location.replace("&ifGenerationMatch=0", ""),
                                      what=f"cancel of the {self.what}")
        except Exception:
            pass
