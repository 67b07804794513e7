"""A state directory whose schedules are JSON text (schema version 9; old_state/make_schedules.py
wrote it with that version's code) opens with this code: the migration rewrites every schedule
in the storage format, each reads back as it was written (old_state/schedules_sample.py), and
the migration runs again harmlessly on a database set back to an older version."""

from __future__ import annotations

import gzip
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from corral_server.domain.schedules import Schedule
from corral_server.schedules.store import SqliteSchedules
from corral_server.store.database import DB_FILE, Database
from corral_server.store.format.schedules import decode_schedule
from corral_server.store.schema import SCHEMA_VERSION
from tests.unit.store.old_state.schedules_sample import as_restored

OLD_STATE = Path(__file__).parent / "old_state" / "schedules.db.gz"
OLD_VERSION = 9
EXPECTED = as_restored()


def old_state(directory: Path) -> Path:
    directory.mkdir()
    (directory / DB_FILE).write_bytes(gzip.decompress(OLD_STATE.read_bytes()))
    return directory


def stored(state: Path) -> tuple[int, list[tuple[str, str, bytes | str]], str]:
    """The version, each record's id, SQLite type and value, and the table's declaration."""
    with closing(sqlite3.connect(state / DB_FILE)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        records = conn.execute(
            "SELECT schedule_id, typeof(record), record FROM schedules ORDER BY schedule_id"
        ).fetchall()
        [table] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'schedules'")
    return version, records, table[0]


async def load(state: Path) -> list[Schedule]:
    database = await Database.open(state, synchronous="NORMAL")
    try:
        return await SqliteSchedules(database).load()
    finally:
        await database.close()


def test_the_fixture_is_the_old_format(tmp_path: Path) -> None:
    version, records, table = stored(old_state(tmp_path / "state"))
    assert version == OLD_VERSION
    assert len(records) == len(EXPECTED)
    assert all(kind == "text" and str(r).startswith('{"id": ') for _, kind, r in records)
    assert "record TEXT" in table


async def test_every_schedule_migrates_intact_in_the_storage_format(tmp_path: Path) -> None:
    state = old_state(tmp_path / "state")
    assert await load(state) == EXPECTED
    version, records, table = stored(state)
    assert version == SCHEMA_VERSION
    blobs = [r for _, kind, r in records if kind == "blob" and isinstance(r, bytes)]
    by_id = sorted(EXPECTED, key=lambda s: s.id)
    assert [decode_schedule(blob) for blob in blobs] == by_id  # every record, as it was
    assert "record BLOB" in table


async def test_the_migration_runs_again_on_a_database_set_back(tmp_path: Path) -> None:
    state = old_state(tmp_path / "state")
    await load(state)
    _, migrated, _ = stored(state)
    with closing(sqlite3.connect(state / DB_FILE)) as conn, conn:
        conn.execute(f"PRAGMA user_version = {OLD_VERSION}")
    assert await load(state) == EXPECTED
    assert stored(state)[:2] == (SCHEMA_VERSION, migrated)


async def test_a_record_that_does_not_read_is_kept_and_refused_at_load(tmp_path: Path) -> None:
    state = old_state(tmp_path / "state")
    with closing(sqlite3.connect(state / DB_FILE)) as conn, conn:
        conn.execute("INSERT INTO schedules VALUES ('sched-bad', '{\"id\": ', 1)")
    with pytest.raises(ValueError, match="not an encoded schedule"):
        await load(state)
    _, records, _ = stored(state)
    assert ("sched-bad", "text", '{"id": ') in records
    assert sum(kind == "blob" for _, kind, _ in records) == len(EXPECTED)
