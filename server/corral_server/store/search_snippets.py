"""The snippets of a page of search hits (store/search.py), in the reader thread.

Each hit's snippet is made in a small in-memory FTS5 table that holds just the page's rows,
with the index's columns and tokenizer, so the same matches are marked (a row matches a query
by its own tokens alone). `snippet()` in the index itself would seek the query's doclists
again for every hit: ~0.6 ms a hit for a word in 1% of a million rows.

Must not: run on the loop, or import protobuf or grpc.
"""

from __future__ import annotations

import sqlite3
from typing import Any

MARK_OPEN = "\u00ab"  # «
MARK_CLOSE = "\u00bb"  # »
ELLIPSIS = "\u2026"
SNIPPET_TOKENS = 16
MAX_SNIPPET_CHARS = 320

# The index's columns and options, as store/schema.py creates `timeline_text`.
_TABLE = (
    "CREATE VIRTUAL TABLE timeline_text USING fts5(text, kind UNINDEXED, timestamp_ms UNINDEXED)"
)
_INSERT = "INSERT INTO timeline_text (rowid, text, kind, timestamp_ms) VALUES (?, ?, ?, ?)"
_SNIPPETS = (
    "SELECT rowid, snippet(timeline_text, 0, ?, ?, ?, ?) FROM timeline_text"
    " WHERE timeline_text MATCH ?"
)


class Snippets:
    """The in-memory table, opened at first use. Used in the reader thread only; `close()`
    there too (its argument: the reader's connection, unused)."""

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None

    def of(self, query: str, rows: list[tuple[Any, ...]]) -> dict[int, str]:
        """rowid -> snippet, for `rows` of (rowid, text, kind, timestamp_ms)."""
        if not rows:
            return {}
        conn = self._conn
        if conn is None:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            conn.execute(_TABLE)
            self._conn = conn
        marks = (MARK_OPEN, MARK_CLOSE, ELLIPSIS, SNIPPET_TOKENS)
        conn.execute("BEGIN")
        try:
            conn.executemany(_INSERT, rows)
            return dict(conn.execute(_SNIPPETS, (*marks, query)).fetchall())
        finally:
            conn.execute("ROLLBACK")  # the table stays empty between pages

    def close(self, _: object = None) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def clip(snippet: str) -> str:
    if len(snippet) <= MAX_SNIPPET_CHARS:
        return snippet
    return snippet[: MAX_SNIPPET_CHARS - 1] + ELLIPSIS
