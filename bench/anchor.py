"""The disk's own limits, measured in the same run as the durable figures they anchor.

  P1''  bare SQLite: the rows bench.writer's burst stores (the same item blobs, the same
        event frames, encoded beforehand), written with the store's pragmas and fsync
        policy (WAL, synchronous=FULL) by `executemany` on one thread, one transaction per
        batch (timeline rows, events, the timeline's head, the log's size), batches the size
        of corral's own commits in the same run. Corral's durable P1' against it.
  fsync the latency of the smallest commit the store makes (one row, its event, the head and
        the log's size: what acknowledging a SendPrompt waits for), p50 / p99, on the same
        disk. P5 durable's goal is relative to it: p99 at most 2x the fsync p99 + 2 ms.

Nothing here runs on an event loop: the caller runs these in a thread (`asyncio.to_thread`).

Run: .venv/bin/python -m bench.anchor [rows [rows_per_commit]]
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.burst import TEXT
from corral_server.domain.timeline import AssistantMessage
from corral_server.hub.ring import frame_with_revision
from corral_server.records.store import LogEntry
from corral_server.rpc.wire import row_appended_batch
from corral_server.store.database import _CACHE_KIB, DB_FILE
from corral_server.store.event_runs import INSERT as _INSERT_RUN
from corral_server.store.event_runs import runs_of
from corral_server.store.full_disk import PRAGMAS
from corral_server.store.schema import migrate
from corral_server.timeline.store import NewRow

AGENT = "agent-anchor"
EPOCH = "0" * 32

_INSERT_ROW = (
    "INSERT INTO timeline_rows (timeline_id, seq, timestamp_ms, turn_id, provider_message_id,"
    " item) VALUES (?, ?, ?, ?, ?, ?)"
)
_UPDATE_HEAD = "UPDATE timelines SET next_seq = ?, first_seq = ? WHERE agent_id = ?"
_LOG_BYTES = (
    "INSERT INTO meta (key, value) VALUES ('event_log_bytes', ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


def _connect(directory: Path) -> sqlite3.Connection:
    """A database with corral's schema and its writer's pragmas (store/database.py)."""
    conn = sqlite3.connect(directory / DB_FILE, isolation_level=None, cached_statements=256)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
    for pragma in PRAGMAS:
        conn.execute(pragma)
    migrate(conn, directory / DB_FILE)
    conn.execute(
        "INSERT INTO timelines (agent_id, timeline_id, epoch, next_seq, first_seq)"
        " VALUES (?, 1, ?, 1, 1)",
        (AGENT, EPOCH),
    )
    return conn


Row = tuple[int, int, int, str, str, bytes]  # timeline_rows' columns
Event = tuple[int, str, bytes]  # events' columns


def _encoded(rows: int) -> tuple[list[Row], list[Event]]:
    """The burst's rows as the store keeps them, and their events as the log keeps them."""
    burst = [
        NewRow(AssistantMessage(TEXT, f"m{i}"), 1_764_000_000_000 + i // 50, "turn-1", f"m{i}")
        for i in range(rows)
    ]
    bodies, items = row_appended_batch(AGENT, EPOCH, 1, burst)
    stored = [
        (1, i + 1, row.timestamp_ms, row.turn_id, row.provider_message_id, item)
        for i, (row, item) in enumerate(zip(burst, items, strict=True))
    ]
    events = [(i + 1, AGENT, frame_with_revision(i + 1, body)) for i, body in enumerate(bodies)]
    return stored, events


def bare_rows_per_s(rows: int, rows_per_commit: int) -> float:
    """P1'': rows/s of the bare writer (see the module doc). Blocking: run it in a thread."""
    stored, events = _encoded(rows)
    batch = max(1, rows_per_commit)
    # The log's rows as the store makes them (runs of events: store/event_runs.py), made
    # beforehand like every other row here.
    runs = [
        runs_of([LogEntry(*event) for event in events[start : start + batch]])
        for start in range(0, rows, batch)
    ]
    with tempfile.TemporaryDirectory(prefix="corral-anchor-") as scratch:
        conn = _connect(Path(scratch))
        try:
            size = 0
            started = time.perf_counter()
            for start in range(0, rows, batch):
                stop = min(rows, start + batch)
                conn.execute("BEGIN")
                conn.executemany(_INSERT_ROW, stored[start:stop])
                conn.executemany(_INSERT_RUN, runs[start // batch])
                conn.execute(_UPDATE_HEAD, (stop + 1, 1, AGENT))
                size += sum(len(event[2]) for event in events[start:stop])
                conn.execute(_LOG_BYTES, (str(size),))
                conn.execute("COMMIT")
            elapsed = time.perf_counter() - started
        finally:
            conn.close()
    return rows / elapsed


def fsync_ms(samples: int = 200) -> dict[str, float]:
    """p50 / p99 (ms) of the store's smallest commit on this disk. Blocking: run it in a
    thread."""
    stored, events = _encoded(samples)
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="corral-fsync-") as scratch:
        conn = _connect(Path(scratch))
        try:
            for i in range(samples):
                started = time.perf_counter()
                conn.execute("BEGIN")
                conn.execute(_INSERT_ROW, stored[i])
                conn.execute(_INSERT_RUN, (i + 1, 1, AGENT, None, None, events[i][2]))
                conn.execute(_UPDATE_HEAD, (i + 2, 1, AGENT))
                conn.execute(_LOG_BYTES, (str(i),))
                conn.execute("COMMIT")
                times.append((time.perf_counter() - started) * 1000)
        finally:
            conn.close()
    ordered = sorted(times)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


def fsync_report(fsync: dict[str, float]) -> str:
    return (
        f"fsync (the store's smallest commit on this disk, WAL + synchronous=FULL): "
        f"p50 {fsync['p50']:.1f} ms, p99 {fsync['p99']:.1f} ms"
    )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    per_commit = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000
    rate = bare_rows_per_s(n, per_commit)
    print(f"P1'' bare SQLite, {per_commit:,} rows per commit: {rate:,.0f} rows/s ({n:,} rows)")
    print(fsync_report(fsync_ms()))
