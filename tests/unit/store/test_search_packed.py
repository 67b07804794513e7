"""The packed insert of full-text entries (store/search_packed.py) leaves the index exactly as
an `executemany` of the same entries does: multi-byte text, texts holding NULs, chunks cut by
row count and by bytes, negative timestamps; a text Python cannot encode fails as before."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest

from corral_server.store import search_packed
from corral_server.store.search_snippets import _TABLE

Entry = tuple[Any, ...]

ENTRIES: list[Entry] = [
    ((1 << 32) + 1, "plain words here", "assistant_message", 1),
    ((1 << 32) + 2, "naïve café — 日本語 テキスト 🦆 emoji", "user_message", -5),
    ((1 << 32) + 3, "x" * 5000 + " tail", "tool_call", 1 << 40),
    ((2 << 32) + 1, "short", "reasoning", 0),
]
WITH_NUL: list[Entry] = [*ENTRIES, ((3 << 32) + 1, "before\x00after nul", "error", 7)]


def filled(entries: list[Entry], packed: bool) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(_TABLE)
        if packed:
            search_packed.insert(conn, entries)
        else:
            conn.executemany(search_packed.INSERT, entries)
        rows = conn.execute(
            "SELECT rowid, text, typeof(text), kind, timestamp_ms, typeof(timestamp_ms)"
            " FROM timeline_text ORDER BY rowid"
        ).fetchall()
        matched = conn.execute(
            "SELECT rowid FROM timeline_text WHERE timeline_text MATCH"
            " 'café OR 日本語 OR tail OR after OR short' ORDER BY rowid"
        ).fetchall()
        conn.execute("INSERT INTO timeline_text (timeline_text) VALUES ('integrity-check')")
    return [*rows, *matched]


@pytest.mark.parametrize("entries", [ENTRIES, WITH_NUL])
def test_packed_equals_executemany(entries: list[Entry]) -> None:
    assert filled(entries, packed=True) == filled(entries, packed=False)


def test_chunks_cut_by_rows_and_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = filled(ENTRIES, packed=False)
    statements: list[int] = []
    real = search_packed._insert_chunk

    def counted(conn: sqlite3.Connection, chunk: list[Entry], *args: Any) -> None:
        statements.append(len(chunk))
        real(conn, chunk, *args)

    monkeypatch.setattr(search_packed, "_insert_chunk", counted)
    monkeypatch.setattr(search_packed, "CHUNK_ROWS", 3)
    assert filled(ENTRIES, packed=True) == expected
    assert statements == [3, 1]
    statements.clear()
    monkeypatch.setattr(search_packed, "CHUNK_BYTES", 100)  # the 5,000-byte text alone
    assert filled(ENTRIES, packed=True) == expected
    assert statements == [2, 1, 1]


def test_a_text_python_cannot_encode_fails_as_the_binding_does() -> None:
    bad = [*ENTRIES, ((4 << 32) + 1, "lone \ud800 surrogate", "error", 1)]
    with pytest.raises(UnicodeEncodeError):
        filled(bad, packed=False)
    with pytest.raises(UnicodeEncodeError):
        filled(bad, packed=True)
