"""One commit's full-text index entries into FTS5 in one statement per chunk: the same packing
as store/packed_rows.py does for the rows (docs/design.md#packed-inserts).

Why: an `executemany` of the entries binds them row by row holding the GIL and lets it go for
each row's step, so in a burst the writer thread queued for the GIL once per indexed row behind
the event loop (BENCHMARKS.md, "The write cost, profiled again"). One `INSERT ... SELECT ...
FROM json_each(?)` is one step: the whole FTS5 insert, tokenizing included, runs in SQLite
without the GIL, beside the loop.

The packing is a few C calls per chunk, no Python code per entry: the texts encoded and joined
into one UTF-8 blob sliced by fixed-width decimal offsets (`substr` of a blob is O(1) and
counts bytes; `CAST(... AS TEXT)` gives SQLite back the same UTF-8 text the binding would
have), the rowids and timestamps as fixed-width decimals, and the kinds (a few fixed ASCII
names) as the JSON array of strings that drives the select.

Falls back to `executemany` (the same rows, the same result): an SQLite without JSON (before
3.38), a text holding a NUL or one Python cannot encode as UTF-8 (the binding reports that
as before).

Must not: run on the loop (the writer thread's, inside its transaction), or import protobuf.
"""

from __future__ import annotations

import json
import sqlite3
from itertools import accumulate
from operator import itemgetter
from typing import Any

_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
PACKED = sqlite3.sqlite_version_info >= (3, 38, 0)

# A chunk's text blob stays far below SQLite's default 1,000,000,000-byte value limit.
CHUNK_BYTES = 64 * 1024 * 1024
CHUNK_ROWS = 50_000

INSERT = "INSERT INTO timeline_text (rowid, text, kind, timestamp_ms) VALUES (?, ?, ?, ?)"
# Entry i: its kind is the JSON array's element i; its rowid and timestamp the i-th
# 20-character decimals of ?1 and ?2; its text the bytes of ?4 from the i-th to the (i+1)-th
# 10-character decimal offset of ?3.
_INSERT_PACKED = (
    "INSERT INTO timeline_text (rowid, text, kind, timestamp_ms)"
    " SELECT CAST(substr(?1, j.key * 20 + 1, 20) AS INTEGER),"
    " CAST(substr(?4, CAST(substr(?3, j.key * 10 + 1, 10) AS INTEGER) + 1,"
    " CAST(substr(?3, j.key * 10 + 11, 10) AS INTEGER)"
    " - CAST(substr(?3, j.key * 10 + 1, 10) AS INTEGER)) AS TEXT),"
    " j.value, CAST(substr(?2, j.key * 20 + 1, 20) AS INTEGER)"
    " FROM json_each(?5) AS j"
)

_ROWID, _TEXT, _KIND, _TIMESTAMP = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


def insert(conn: sqlite3.Connection, entries: list[tuple[Any, ...]]) -> None:
    """`entries` ((rowid, text, kind, timestamp_ms), in rowid order) in as few statements as
    the chunk bounds allow."""
    if not PACKED:
        conn.executemany(INSERT, entries)
        return
    start = 0
    while start < len(entries):
        stop = min(start + CHUNK_ROWS, len(entries))
        chunk = entries[start:stop]
        try:
            encoded = list(map(str.encode, map(_TEXT, chunk)))
        except UnicodeEncodeError:
            conn.executemany(INSERT, chunk)  # raises as the binding always did
            start = stop
            continue
        offsets = list(accumulate(map(len, encoded), initial=0))
        if offsets[-1] > CHUNK_BYTES:  # cut where the bytes run out (at least one entry)
            cut = max(1, next(i for i, end in enumerate(offsets) if end > CHUNK_BYTES) - 1)
            chunk, encoded, offsets = chunk[:cut], encoded[:cut], offsets[: cut + 1]
        _insert_chunk(conn, chunk, encoded, offsets)
        start += len(chunk)


def _insert_chunk(
    conn: sqlite3.Connection,
    chunk: list[tuple[Any, ...]],
    encoded: list[bytes],
    offsets: list[int],
) -> None:
    blob = b"".join(encoded)
    if b"\x00" in blob or not blob:  # `substr` of an empty blob is NULL
        conn.executemany(INSERT, chunk)
        return
    count = len(chunk)
    rowids = (b"%020d" * count) % tuple(map(_ROWID, chunk))
    timestamps = (b"%020d" * count) % tuple(map(_TIMESTAMP, chunk))
    packed_offsets = (b"%010d" * (count + 1)) % tuple(offsets)
    kinds = _encode(list(map(_KIND, chunk)))
    conn.execute(_INSERT_PACKED, (rowids, timestamps, packed_offsets, blob, kinds))
