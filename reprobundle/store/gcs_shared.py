"""Several machines writing one GCS bucket: what GCSStore needs beyond create-only writes (store/gcs.py).

Leases are files one machine locks (store/scratch.py); on a bucket shared by several machines what protects a
running writer from a gc elsewhere is the grace period, so a writer's use of an object is recorded on the bucket:
- `touch` writes the time into the object's custom metadata (USED_METADATA; GCS also moves its `updated` time and
  its metageneration, fake-gcs-server does neither) and `last_use` is the later of the two times: gc's age.
- `delete_if_stale` judges that age and deletes at the generation and metageneration it judged
  (ifGenerationMatch, ifMetagenerationMatch): GCS refuses the delete (412) once a touch landed in between.
  fake-gcs-server 1.54 ignores preconditions on deletes: there that window is the one request.
- `put_if` writes over the value read, at the generation it was read from (ifGenerationMatch; 0: no object), so of
  two writers from one value one gets 412; tags are moved with it.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime

from .gcs_http import GCSClient, GCSNotFound, GCSPreconditionFailed, GCSResponseError
from .gcs_upload import upload_single

USED_METADATA = "reprobundle-used"  # custom metadata: when a writer last used the object (seconds since the epoch)


def timestamp(rfc3339: str | None) -> float | None:
    """Seconds since the epoch of a JSON-API time ('2024-05-01T12:00:00.123Z'; servers may give 9 fractional
    digits, which datetime does not read)."""
    if not rfc3339:
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", rfc3339.strip())
    if not m:
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{(m.group(2) or '0')[:6].ljust(6, '0')}{zone}").timestamp()


def last_use(meta: dict) -> float | None:
    """The later of an object's `updated` time and the last use a writer recorded in its metadata (`touch`); a
    recorded value that is not a finite number is ignored."""
    times = [timestamp(meta.get("updated"))]
    recorded = meta.get("metadata")
    used = recorded.get(USED_METADATA) if isinstance(recorded, dict) else None
    if isinstance(used, str):
        try:
            times.append(float(used))
        except ValueError:
            pass
    known = [t for t in times if t is not None and math.isfinite(t)]
    return max(known) if known else None


async def touch(client: GCSClient, bucket: str, name: str) -> bool | None:
    """Record now as the object's last use: True; False if there is no such object; None where GCS refuses the
    update, to an account that may create objects but not update them (403) or because others update the object
    this very second (429, its per-object rate): the caller then only checks that it exists."""
    try:
        await client.request("PATCH", client.object_url(bucket, name), what=f"touch of {name}",
                             params={"fields": "name"}, json={"metadata": {USED_METADATA: f"{time.time():.3f}"}})
    except GCSNotFound:
        return False
    except GCSResponseError as e:
        if e.status not in (403, 429):
            raise
        return None
    return True


async def delete_if_stale(client: GCSClient, bucket: str, name: str, cutoff: float | None) -> bool:
    """Delete the object unless it was used at or after `cutoff` (None: whatever its age), at the generation and
    metageneration whose age was judged; True if it was deleted."""
    url = client.object_url(bucket, name)
    try:
        meta = await client.get_json(url, {"fields": "updated,metadata,generation,metageneration"})
    except GCSNotFound:
        return False
    if cutoff is not None:
        when = last_use(meta)
        if when is None or when >= cutoff:
            return False
    try:
        await client.request("DELETE", url, params={"ifGenerationMatch": meta.get("generation"),
                                                    "ifMetagenerationMatch": meta.get("metageneration")})
    except (GCSNotFound, GCSPreconditionFailed):
        return False
    return True


async def put_if(client: GCSClient, bucket: str, name: str, data, expected: bytes | None, max_bytes: int) -> bool:
    """Write `data` if the object holds `expected` (None: no object), conditional on the generation that value was
    read from; False, having written nothing, where it does not or another writer replaced it meanwhile."""
    try:
        meta = await client.get_json(client.object_url(bucket, name), {"fields": "size,generation"})
        generation = str(meta["generation"])
        size = int(meta.get("size") or 0)
        if size > max_bytes:
            return False
        current: bytes | None = b""
        if size:
            current = (await client.request("GET", client.media_url(bucket, name),
                                            params={"alt": "media", "generation": generation})).body
    except GCSNotFound:  # no object, or replaced between the two requests (then the comparison fails below)
        current, generation = None, "0"
    if current != expected:
        return False
    try:
        await upload_single(client, bucket, name, data, create_only=False, generation=generation)
    except GCSPreconditionFailed:
        return False
    return True
