"""Many rows into SQLite in one statement: the hot insert of a group commit, the timeline's
rows, each run of rows packed into a few parameters and inserted by one
`INSERT ... SELECT ... FROM json_each(?)` (docs/design.md#packed-inserts). (The event log
writes one row per run of up to 64 events already: store/event_runs.py.)

Why: the sqlite3 module binds an `executemany`'s parameters row by row holding the GIL and lets
it go for each row's step, so the writer thread queues for the GIL once per row behind the
event loop: with the loop busy (a burst), a commit of 20,000 rows waited for the GIL 20,000
times and ran at a fraction of its speed alone. One statement is one step: the whole insert
runs in SQLite without the GIL, beside the loop.

The packing is a few C calls per run, no Python code per row: the rows' bytes joined into one
blob, their offsets (and timestamps) formatted as fixed-width decimals by one `%` each (SQLite
reads field i of a blob in O(1) with `substr`, and slices each row's bytes out of the joined
blob the same way), and the only per-row text, the provider message ids, as one JSON array
of strings (whose elements drive the select). A run shares its timeline and its turn (rows
are cut into runs where it changes).

Two cases (and an SQLite older than 3.38, whose JSON may be missing) go by `executemany`
instead, as before: a message id holding a NUL (SQLite's JSON
reads the escaped "\\u0000" as the string's end) and a run whose bytes are all empty (`substr`
of an empty blob is NULL).

Must not: run on the loop (the writer thread's, inside its transaction), or import protobuf.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from itertools import accumulate, chain, groupby, repeat
from operator import itemgetter
from typing import NamedTuple

from corral_server.timeline.store import NewRow

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
_NUL = "\\u0000"  # how the encoder writes a NUL character
# JSON is built into SQLite from 3.38 (window functions from 3.25); an older library inserts
# by `executemany`, as before.
PACKED = sqlite3.sqlite_version_info >= (3, 38, 0)

_TIMESTAMP, _TURN_ID, _PROVIDER_MESSAGE_ID = itemgetter(1), itemgetter(2), itemgetter(3)


class RowBatch(NamedTuple):
    """Consecutive rows of one timeline: numbered from `seq`, `items[i]` the encoded item of
    `rows[i]` (the store's blob)."""

    timeline_id: int
    seq: int
    rows: Sequence[NewRow]
    items: Sequence[bytes]


# Row i of a run: its provider message id is the JSON array's element i (the array drives the
# select); its timestamp the i-th 20-character decimal of ?4; its item the bytes of ?6 from the
# i-th to the (i+1)-th 10-character decimal offset of ?5. Fixed-width decimals: SQLite reads
# field i of a blob in O(1) (`substr`), and the formatting is one C call for the whole run.
_INSERT_ROWS = (
    "INSERT INTO timeline_rows (timeline_id, seq, timestamp_ms, turn_id, provider_message_id,"
    " item) SELECT ?1, ?2 + j.key, CAST(substr(?4, j.key * 20 + 1, 20) AS INTEGER), ?3, j.value,"
    " substr(?6, CAST(substr(?5, j.key * 10 + 1, 10) AS INTEGER) + 1,"
    " CAST(substr(?5, j.key * 10 + 11, 10) AS INTEGER)"
    " - CAST(substr(?5, j.key * 10 + 1, 10) AS INTEGER))"
    " FROM json_each(?7) AS j"
)
_INSERT_ROW = (
    "INSERT INTO timeline_rows (timeline_id, seq, timestamp_ms, turn_id, provider_message_id,"
    " item) VALUES (?, ?, ?, ?, ?, ?)"
)


def insert_rows(conn: sqlite3.Connection, batches: Sequence[RowBatch]) -> None:
    """Insert every batch's rows: one statement per run of contiguous rows of one timeline
    and one turn."""
    for run in _runs(batches):
        first = run[0]
        rows = list(chain.from_iterable(batch.rows for batch in run))
        items = list(chain.from_iterable(batch.items for batch in run))
        seq, start = first.seq, 0
        for turn_id, count in _turns(rows):
            stop = start + count
            _insert_turn(conn, first.timeline_id, seq, turn_id, rows[start:stop], items[start:stop])
            seq, start = seq + count, stop


def _insert_turn(
    conn: sqlite3.Connection,
    timeline_id: int,
    seq: int,
    turn_id: str,
    rows: list[NewRow],
    items: list[bytes],
) -> None:
    count = len(rows)
    message_ids = _encode(list(map(_PROVIDER_MESSAGE_ID, rows)))
    blob = b"".join(items)
    if _NUL in message_ids or not blob or not PACKED:
        tuples = zip(
            repeat(timeline_id, count),
            range(seq, seq + count),
            map(_TIMESTAMP, rows),
            map(_TURN_ID, rows),
            map(_PROVIDER_MESSAGE_ID, rows),
            items,
            strict=False,
        )
        conn.executemany(_INSERT_ROW, tuples)
        return
    timestamps = (b"%020d" * count) % tuple(map(_TIMESTAMP, rows))
    offsets = (b"%010d" * (count + 1)) % tuple(accumulate(map(len, items), initial=0))
    conn.execute(_INSERT_ROWS, (timeline_id, seq, turn_id, timestamps, offsets, blob, message_ids))


def _turns(rows: list[NewRow]) -> list[tuple[str, int]]:
    """`rows` as runs of one turn: (turn id, rows) each, in order."""
    turns = list(map(_TURN_ID, rows))
    if turns.count(turns[0]) == len(turns):  # one turn: the usual case, counted in C
        return [(turns[0], len(turns))]
    return [(turn_id, len(list(run))) for turn_id, run in groupby(turns)]


def _runs(batches: Sequence[RowBatch]) -> list[list[RowBatch]]:
    """`batches` cut where the timeline changes or the seqs do not follow on."""
    runs: list[list[RowBatch]] = []
    follows = (-1, -1)
    for batch in batches:
        if not batch.rows:
            continue
        if (batch.timeline_id, batch.seq) == follows:
            runs[-1].append(batch)
        else:
            runs.append([batch])
        follows = (batch.timeline_id, batch.seq + len(batch.rows))
    return runs
