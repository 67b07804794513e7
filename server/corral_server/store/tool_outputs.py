"""The `tool_outputs` table (store/schema.py): large tool outputs kept apart from their rows
(manager/tool_output.py), in the database's threads.

An output belongs to the row (timeline_id, seq) that references it and is written, trimmed and
deleted in that row's transaction: an append inserts it with its row; retention deletes it with
its row. A rebase (Rewind, a rehydrating reload) leaves the old epoch's outputs in place,
unreadable (no timeline has their timeline_id any more), so that the rewind's copies of the
rows it keeps take theirs over (`take over`: the row's new timeline_id and seq); what no copy
took is deleted by the next sweep: at the agent's next rebase or drop, and at every open.

Reads go through the reader thread's incremental blob I/O: a chunk costs its own bytes, not the
whole output's.

Must not: run on the loop, or import protobuf or grpc.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import NamedTuple

from corral_server.errors import ToolOutputNotFound
from corral_server.timeline.outputs import check_offset
from corral_server.timeline.store import OutputChunk


class OutputWrite(NamedTuple):
    """An appended row's output: `data` to insert, or None when the row is a copy that takes
    over the output its earlier copy kept."""

    blob_id: str
    timeline_id: int
    seq: int
    json: bool
    data: bytes | None


_INSERT = "INSERT INTO tool_outputs (blob_id, timeline_id, seq, json, data) VALUES (?, ?, ?, ?, ?)"
# Only an output no timeline holds (a re-based epoch's) can be taken over.
_TAKE_OVER = (
    "UPDATE tool_outputs SET timeline_id = ?, seq = ? WHERE blob_id = ?"
    " AND timeline_id NOT IN (SELECT timeline_id FROM timelines)"
)
_TRIM = "DELETE FROM tool_outputs WHERE timeline_id = ? AND seq < ?"
_SWEEP = "DELETE FROM tool_outputs WHERE timeline_id NOT IN (SELECT timeline_id FROM timelines)"


def write(conn: sqlite3.Connection, outputs: Sequence[OutputWrite]) -> None:
    """In the writer's transaction, after the rows they belong to."""
    if not outputs:
        return
    inserts = [
        (o.blob_id, o.timeline_id, o.seq, int(o.json), o.data)
        for o in outputs
        if o.data is not None
    ]
    moves = [(o.timeline_id, o.seq, o.blob_id) for o in outputs if o.data is None]
    conn.executemany(_INSERT, inserts)
    conn.executemany(_TAKE_OVER, moves)


def trim(conn: sqlite3.Connection, trims: Sequence[tuple[int, int]]) -> None:
    """Retention: (timeline_id, first retained seq) pairs."""
    conn.executemany(_TRIM, trims)


def sweep_outputs(conn: sqlite3.Connection) -> None:
    conn.execute(_SWEEP)


_FIND = (
    "SELECT o.rowid, o.json, length(o.data) FROM tool_outputs AS o"
    " JOIN timelines AS t ON t.timeline_id = o.timeline_id"
    " WHERE o.blob_id = ? AND t.agent_id = ? AND o.seq >= t.first_seq AND o.seq < t.next_seq"
)


def read_output(
    agent_id: str, blob_id: str, offset: int, limit: int, conn: sqlite3.Connection
) -> OutputChunk:
    """Runs in the reader thread: the output's size and one chunk, from one snapshot."""
    conn.execute("BEGIN")
    try:
        found = conn.execute(_FIND, (blob_id, agent_id)).fetchone()
        if found is None:
            raise ToolOutputNotFound(agent_id, blob_id)
        rowid, is_json, size = found
        check_offset(offset, size)
        with conn.blobopen("tool_outputs", "data", rowid, readonly=True) as blob:
            blob.seek(offset)
            data = blob.read(limit)
    finally:
        conn.execute("COMMIT")
    return OutputChunk(data, offset, size, bool(is_json))
