"""The packed insert (store/packed_rows.py) stores exactly what one INSERT per row would: every
column, its type, and the bytes, whatever the rows' text holds."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral_server.domain.timeline import AssistantMessage
from corral_server.store import packed_rows
from corral_server.store.packed_rows import RowBatch, insert_rows
from corral_server.store.schema import migrate
from corral_server.timeline.store import NewRow

_ROW_COLUMNS = (
    "SELECT timeline_id, seq, timestamp_ms, turn_id, provider_message_id, item,"
    " typeof(timestamp_ms), typeof(turn_id), typeof(provider_message_id), typeof(item)"
    " FROM timeline_rows ORDER BY timeline_id, seq"
)


@pytest.fixture(params=[True, False], ids=["packed", "executemany"])
def packed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every test runs packed and by the fallback (an SQLite without JSON): the same rows."""
    monkeypatch.setattr(packed_rows, "PACKED", request.param)
    return bool(request.param)


@pytest.fixture
def conn(packed: bool, tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "db", isolation_level=None)
    try:
        migrate(connection, tmp_path / "db")
        yield connection
    finally:
        connection.close()  # Python 3.13 warns of an unclosed database


def _row(timestamp_ms: int, turn_id: str, provider_message_id: str) -> NewRow:
    return NewRow(AssistantMessage("text"), timestamp_ms, turn_id, provider_message_id)


def _expected(batches: list[RowBatch]) -> list[tuple[object, ...]]:
    return [
        (b.timeline_id, b.seq + i, row[1], row[2], row[3], item, "integer", "text", "text", "blob")
        for b in batches
        for i, (row, item) in enumerate(zip(b.rows, b.items, strict=True))
    ]


@pytest.mark.parametrize(
    "message_id",
    ["m1", "", "émoji 😀 \u2028", 'quote " and \\ backslash', "nul \x00 inside", "\x01\x1f"],
)
def test_every_column_is_stored_as_one_insert_per_row_would(
    conn: sqlite3.Connection, message_id: str
) -> None:
    batch = RowBatch(
        3,
        7,
        [_row(1_764_000_000_123, "turn-1", message_id), _row(-5, "turn-1", "m2")],
        [b"\x12\x00\x01", b""],
    )
    insert_rows(conn, [batch])
    assert conn.execute(_ROW_COLUMNS).fetchall() == _expected([batch])


def test_batches_of_several_timelines_turns_and_gaps_keep_their_seqs(
    conn: sqlite3.Connection,
) -> None:
    batches = [
        RowBatch(1, 1, [_row(10, "a", "x"), _row(11, "b", "y")], [b"1", b"22"]),
        RowBatch(1, 3, [_row(12, "b", "z")], [b"333"]),  # follows on: the same run
        RowBatch(2, 1, [_row(13, "a", "w")], [b"4444"]),  # another timeline
        RowBatch(1, 9, [_row(14, "a", "v"), _row(15, "a", "u")], [b"5", b"66"]),  # a gap
        RowBatch(2, 2, [], []),
    ]
    insert_rows(conn, batches)
    assert conn.execute(_ROW_COLUMNS).fetchall() == sorted(_expected(batches))
