"""What a bundle's zip judges when it is run (`python NAME.zip`), where an investigation answered: the record
`reproducer.json` beside the store layout, and the expected outputs it names, stored as blobs of that layout.

The record (JSON; format `reprobundle-zip-reproducer`, version 1, 2026-12-06) is built above (investigate/
reproducer_zip.py, from the stored answer) and written here by `Registry.export_zip`; worker/standalone.py reads
it with the standard library. Its fields:

    criterion   "outputs" (beyond the tolerance), "bits" (any bit), "error" (fails where the good release ran),
                "time" (slower: judged by `--compare A B`)
    mode        "retrace" (a lowering change: the program the bundle carries, traced by the JAX under test) or
                "frozen" (the bundle's module: a compiler's change)
    good, bad   the last good and first bad release (or the first bad commit), as labels a person reads
    expected    [{"dtype", "shape", "blob": {"digest", "size"}}]: the last good release's stored outputs in that
                mode, bit for bit; [] where none is stored (a slowdown's: the packed reference is checked)
    compare     [A, B]: the two releases `--compare` times (a slowdown's), else null
    why         one line: why this check (the plan's)
    platform    where the last good release's outputs were computed (cpu, gpu, tpu), or null
    answer      {"kind", "answer_id"}: the stored answer it comes from
    bundle_id   the bundle it judges
    changes     (where the report lists several changes, 2026-12-06) each change the zip checks, a record of the
                fields above with its `row` in the report's table, the headline first (it is also the record's own
                fields): `python NAME.zip --change N` judges row N; absent in a record of one change

No record (a zip of a bundle with no stored answer, or one from before that day): the zip checks the frozen module
against its packed reference, as it always did. Nothing in the record is executed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..store.base import Store
from ..store.zip_store import REPRODUCER_ENTRY

FORMAT = "reprobundle-zip-reproducer"
FORMAT_VERSION = 1
CRITERIA = ("outputs", "bits", "error", "time")
MODES = ("retrace", "frozen")


@dataclass
class ZipExpectation:
    """A zip's record (module docstring) and the store that holds the blobs its `expected` leaves name (the runs'
    store: a zip's own runs live in the default local store)."""

    record: dict
    source: Store
    blobs: list[str] = field(init=False)

    def __post_init__(self) -> None:
        r = self.record
        if r.get("format") != FORMAT or r.get("criterion") not in CRITERIA or r.get("mode") not in MODES:
            raise ValueError(f"not a zip reproducer record: {json.dumps(r)[:200]}")
        rows = [r, *(c for c in r.get("changes") or [] if isinstance(c, dict))]
        self.blobs = list(dict.fromkeys(str(leaf["blob"]["digest"]) for row in rows for leaf in row.get("expected") or []))

    def data(self) -> bytes:
        """The record as the zip stores it."""
        return json.dumps(self.record, indent=1, sort_keys=True).encode("utf-8")


def record_entry(expectation: ZipExpectation) -> tuple[str, bytes]:
    """(the zip's entry name, its bytes) of the record."""
    return REPRODUCER_ENTRY, expectation.data()
