"""A state directory written by the corral before the storage format had messages of its own
(schema version 5: agents as corral.v1.Agent bytes, runs as JSON, items as corral.v1 wire bytes;
old_state/make.py wrote it with that code) opens with this one: the migration runs, and every
agent, queued prompt, timeline row, run, event, request id and finished turn is found as it was
written (old_state/sample.py)."""

from __future__ import annotations

import gzip
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral_server.domain.timeline import Direction, TimelineRow
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store import agent_records, event_log, requests, sqlite_timeline
from corral_server.store.database import DB_FILE, Database
from corral_server.store.errors import StoreUnavailable
from corral_server.store.format.runs import decode_run
from corral_server.store.schema import RECORD_FORMAT, SCHEMA_VERSION
from corral_server.store.subagent_runs import SqliteRunStore
from corral_server.timeline.store import NewRow
from tests.unit.store.old_state import sample

OLD_STATE = Path(__file__).parent / "old_state" / "corral.db.gz"
OLD_VERSION = 5


def old_state(directory: Path) -> Path:
    directory.mkdir()
    (directory / DB_FILE).write_bytes(gzip.decompress(OLD_STATE.read_bytes()))
    return directory


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = await Database.open(old_state(tmp_path / "state"), synchronous="NORMAL")
    try:
        yield db
    finally:
        await db.close()


def rows(new: tuple[NewRow, ...]) -> list[TimelineRow]:
    return [
        TimelineRow(seq, r.timestamp_ms, r.item, r.turn_id, r.provider_message_id)
        for seq, r in enumerate(new, start=1)
    ]


def test_the_fixture_is_the_old_format(tmp_path: Path) -> None:
    conn = sqlite3.connect(old_state(tmp_path / "state") / DB_FILE)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == OLD_VERSION
        records = [bytes(r) for (r,) in conn.execute("SELECT record FROM subagent_runs")]
        assert records and all(r.startswith(b'{"run_id":') for r in records)
    finally:
        conn.close()


async def test_the_migration_names_the_format_and_rewrites_every_run(database: Database) -> None:
    assert database.opened_version == OLD_VERSION
    version, format_name, records = await database.read(
        lambda conn: (
            conn.execute("PRAGMA user_version").fetchone()[0],
            conn.execute("SELECT value FROM meta WHERE key = 'record_format'").fetchone()[0],
            [bytes(r) for (r,) in conn.execute("SELECT record FROM subagent_runs")],
        )
    )
    assert (version, format_name) == (SCHEMA_VERSION, RECORD_FORMAT)
    assert sorted(map(decode_run, records), key=lambda r: r.run_id) == list(sample.RUNS)


async def test_every_agent_loads_whole_with_its_queued_prompts(database: Database) -> None:
    loaded = await (await agent_records.SqliteAgentRecords.open(database)).load_headers()
    assert loaded.bad == []
    assert loaded.agents == list(sample.AGENTS)
    [long, short] = loaded.agents[0].queued_prompts
    assert (long.content, short.content) == (sample.LONG_PROMPT, sample.SHORT_PROMPT)


async def test_every_timeline_row_reads_back_in_its_epoch(database: Database) -> None:
    timeline = await sqlite_timeline.SqliteTimelineStore.open(
        database, ITEM_CODEC, search_index=True
    )
    parent = await timeline.fetch(sample.PARENT.id, Direction.TAIL, None, 0)
    seq, provider_message_id = sample.PARENT_PROVIDER_MESSAGE_ID
    expected = rows(sample.PARENT_ROWS)
    expected[seq - 1] = expected[seq - 1]._replace(provider_message_id=provider_message_id)
    assert (parent.epoch, list(parent.rows)) == (sample.PARENT.epoch, expected)
    child = await timeline.fetch(sample.CHILD.id, Direction.TAIL, None, 0)
    assert (child.epoch, list(child.rows)) == (sample.CHILD.epoch, rows(sample.CHILD_ROWS))
    archived = await timeline.fetch(sample.ARCHIVED.id, Direction.TAIL, None, 0)
    assert (archived.epoch, archived.rows) == (sample.ARCHIVED.epoch, ())
    # And the timeline goes on where it was.
    [appended] = await timeline.append(sample.CHILD.id, sample.CHILD_ROWS[:1])
    assert appended.seq == len(sample.CHILD_ROWS) + 1


async def test_every_run_loads_in_spawn_order(database: Database) -> None:
    loaded = await (await SqliteRunStore.open(database)).load()
    assert (loaded.runs, loaded.bad) == (list(sample.RUNS), [])


async def test_the_event_log_request_ids_and_finished_turns_are_kept(database: Database) -> None:
    log = await event_log.SqliteEventLog.open(database)
    assert log.incarnation == sample.INCARNATION
    entries = await log.read(0, 100, 1 << 20)
    assert [tuple(e) for e in entries] == list(sample.EVENTS)
    request_id, fingerprint, agent_id, _ = sample.CREATE_REQUEST
    assert await requests.SqliteCreateRequests(database).find(request_id) == (fingerprint, agent_id)
    turns = requests.SqliteFinishedTurns(database)
    for agent_id, turn_id in sample.FINISHED_TURNS:
        assert await turns.contains(agent_id, turn_id)


async def test_a_migrated_directory_opens_again_without_migrating(tmp_path: Path) -> None:
    state = old_state(tmp_path / "state")
    await (await Database.open(state, synchronous="NORMAL")).close()
    again = await Database.open(state, synchronous="NORMAL")
    try:
        assert again.opened_version == SCHEMA_VERSION
        loaded = await (await SqliteRunStore.open(again)).load()
        assert loaded.runs == list(sample.RUNS)
    finally:
        await again.close()


async def test_a_migration_that_fails_leaves_the_old_version_whole(tmp_path: Path) -> None:
    state = old_state(tmp_path / "state")
    conn = sqlite3.connect(state / DB_FILE)
    conn.execute(
        # The second run's rewrite fails, after the first one's went through.
        "CREATE TRIGGER refuse BEFORE UPDATE ON subagent_runs WHEN old.run_id = 'run-1'"
        " BEGIN SELECT RAISE(ABORT, 'no room'); END"
    )
    conn.commit()
    conn.close()
    with pytest.raises(StoreUnavailable, match=f"from version {OLD_VERSION} to .*no room"):
        await Database.open(state, synchronous="NORMAL")
    conn = sqlite3.connect(state / DB_FILE)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == OLD_VERSION
        records = [bytes(r) for (r,) in conn.execute("SELECT record FROM subagent_runs")]
        assert all(r.startswith(b'{"run_id":') for r in records)
        assert (
            conn.execute("SELECT count(*) FROM meta WHERE key = 'record_format'").fetchone()[0] == 0
        )
        conn.execute("DROP TRIGGER refuse")
        conn.commit()
    finally:
        conn.close()
    reopened = await Database.open(state, synchronous="NORMAL")
    try:
        assert (await (await SqliteRunStore.open(reopened)).load()).runs == list(sample.RUNS)
    finally:
        await reopened.close()
