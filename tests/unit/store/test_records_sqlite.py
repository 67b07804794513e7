"""The SQLite records (store/agent_records.py, requests.py, event_log.py) beyond the shared
contract: everything survives a reopen, a bad record is reported and not fatal, puts coalesce,
appends resolve only once committed, a failed commit leaves no gap, one commit for all."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral_server.domain.agent import Agent
from corral_server.records import LogEntry
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import DB_FILE, Database
from corral_server.store.errors import StoreWriteFailed
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.requests import SqliteCreateRequests, SqliteFinishedTurns
from corral_server.store.schema import MIGRATIONS
from tests.support.stores import AgentCodec, sample_agent


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "state"


async def _agents(database: Database) -> SqliteAgentRecords:
    return await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)


async def _hold_the_writer(database: Database) -> threading.Event:
    """Block the writer thread inside a transaction of its own until the returned event is
    set; returns once the thread is inside it (later jobs wait for the next commit)."""
    loop = asyncio.get_running_loop()
    entered: asyncio.Future[None] = loop.create_future()
    gate = threading.Event()

    def hold(_: object) -> None:
        loop.call_soon_threadsafe(entered.set_result, None)
        gate.wait(10)

    database.submit(hold, lambda _: None, lambda _: None)
    await entered
    return gate


async def test_everything_survives_a_reopen(state: Path) -> None:
    database = await Database.open(state)
    agents = await _agents(database)
    requests = SqliteCreateRequests(database)
    turns = SqliteFinishedTurns(database)
    log = await SqliteEventLog.open(database, retain_events=100)
    kept = [sample_agent("b", title="second"), sample_agent("a", archived_at_ms=5)]
    await asyncio.gather(*(agents.put(agent) for agent in kept))
    await requests.remember("r1", b"fp", "b", 1_000)
    await turns.add("a", "t1")
    entries = [LogEntry(n, "a", f"event {n}".encode()) for n in range(1, 6)]
    await asyncio.gather(*(log.append(*entry) for entry in entries))
    incarnation = log.incarnation
    await database.close()

    database = await Database.open(state)
    try:
        assert (await (await _agents(database)).load_headers()).agents == kept
        assert await SqliteCreateRequests(database).find("r1") == (b"fp", "b")
        reopened_turns = SqliteFinishedTurns(database)  # an empty cache: the table answers
        assert await reopened_turns.contains("a", "t1")
        assert not await reopened_turns.contains("a", "t2")
        reopened = await SqliteEventLog.open(database, mint=lambda: "never used")
        assert reopened.incarnation == incarnation
        assert (reopened.earliest_revision, reopened.head_revision) == (1, 5)
        assert reopened.next_revision == 6
        assert await reopened.read(0, 100, 1 << 20) == entries
    finally:
        await database.close()


async def test_a_record_that_does_not_decode_is_reported_and_the_others_load(
    state: Path,
) -> None:
    database = await Database.open(state)
    try:
        agents = await _agents(database)
        await agents.put(sample_agent("good-1"))
        await database.write(
            lambda conn: conn.executemany(
                "INSERT INTO agents (agent_id, record, updated_ms, created_order)"
                " VALUES (?, ?, 0, ?)",
                [
                    ("garbage", b"\xff\xff\xff", 2),
                    ("no-lifecycle", AgentCodec.encode(sample_agent("x"))[:6], 3),
                    ("other-id", AgentCodec.encode(sample_agent("someone-else")), 4),
                ],
            )
        )
        await agents.put(sample_agent("good-2"))
        loaded = await agents.load_headers()
        assert [a.id for a in loaded.agents] == ["good-1", "good-2"]
        assert [bad.agent_id for bad in loaded.bad] == ["garbage", "no-lifecycle", "other-id"]
        assert all(bad.error for bad in loaded.bad)
        assert "someone-else" in loaded.bad[2].error
    finally:
        await database.close()


async def test_puts_of_one_agent_before_a_commit_are_encoded_and_written_once(
    state: Path,
) -> None:
    database = await Database.open(state)
    try:
        encoded: list[Agent] = []

        def encode(agent: Agent) -> bytes:
            encoded.append(agent)
            return AgentCodec.encode(agent)

        agents = await SqliteAgentRecords.open(database, encode, AgentCodec.decode)
        commits = database.commits
        snapshots = [sample_agent("a1", updated_at_ms=n) for n in range(1, 101)]
        await asyncio.gather(*(agents.put(agent) for agent in snapshots))
        assert encoded == [snapshots[-1]]
        assert database.commits == commits + 1
    finally:
        await database.close()


async def test_a_snapshot_the_codec_refuses_fails_its_own_puts_only(state: Path) -> None:
    database = await Database.open(state)
    try:

        def encode(agent: Agent) -> bytes:
            if agent.id == "bad":
                raise ValueError("cannot encode")
            return AgentCodec.encode(agent)

        agents = await SqliteAgentRecords.open(database, encode, AgentCodec.decode)
        bad = agents.put(sample_agent("bad"))
        good = agents.put(sample_agent("good"))
        await good
        with pytest.raises(ValueError, match="cannot encode"):
            await bad
        assert [a.id for a in (await agents.load_headers()).agents] == ["good"]
    finally:
        await database.close()


async def test_an_append_resolves_only_once_committed(state: Path) -> None:
    database = await Database.open(state)
    try:
        log = await SqliteEventLog.open(database)
        gate = await _hold_the_writer(database)
        appended = log.append(1, "a", b"first")
        for _ in range(20):
            await asyncio.sleep(0)  # loop turns: no time passes that could matter
        assert not appended.done()
        assert log.head_revision == 0 and log.next_revision == 2
        assert await log.read(0, 10, 1 << 20) == []  # readers see committed entries only
        gate.set()
        await appended
        assert log.head_revision == 1
        assert await log.read(0, 10, 1 << 20) == [LogEntry(1, "a", b"first")]
    finally:
        await database.close()


async def test_a_failed_commit_fails_the_appends_queued_behind_and_leaves_no_gap(
    state: Path,
) -> None:
    database = await Database.open(state)
    try:
        log = await SqliteEventLog.open(database)
        await log.append(1, "a", b"one")
        # A stray row where revision 2 goes makes the next commit fail.
        await database.write(
            lambda conn: conn.execute(
                "INSERT INTO event_runs VALUES (2, 1, 'x', NULL, NULL, x'00')"
            )
        )
        gate = await _hold_the_writer(database)
        failing = log.append(2, "a", b"two")
        await asyncio.sleep(0)  # its job is submitted; the next appends queue behind it
        behind = [log.append(3, "a", b"three"), log.append(4, "a", b"four")]
        gate.set()
        for future in (failing, *behind):
            with pytest.raises(StoreWriteFailed):
                await future
        assert (log.head_revision, log.next_revision) == (1, 2)
        await database.write(lambda conn: conn.execute("DELETE FROM event_runs WHERE first = 2"))
        await log.append(2, "a", b"two again")
        assert [e.event for e in await log.read(0, 10, 1 << 20)] == [b"one", b"two again"]
    finally:
        await database.close()


async def test_retention_in_bytes_goes_on_exactly_after_a_reopen(state: Path) -> None:
    database = await Database.open(state)
    log = await SqliteEventLog.open(database, retain_bytes=1_000)
    await asyncio.gather(*(log.append(n, "a", b"x" * 100) for n in range(1, 9)))
    await database.close()
    database = await Database.open(state)
    try:
        log = await SqliteEventLog.open(database, retain_bytes=1_000)
        assert (log.earliest_revision, log.head_revision) == (1, 8)
        await asyncio.gather(*(log.append(n, "a", b"y" * 100) for n in range(9, 13)))
        assert (log.earliest_revision, log.head_revision) == (3, 12)  # 10 x 100 bytes kept
        count = await database.read(
            lambda c: c.execute("SELECT sum(events) FROM event_runs").fetchone()
        )
        assert count == (10,)
    finally:
        await database.close()


async def test_writes_of_every_store_in_one_loop_turn_share_one_commit(state: Path) -> None:
    database = await Database.open(state)
    try:
        agents = await _agents(database)
        requests = SqliteCreateRequests(database)
        turns = SqliteFinishedTurns(database)
        log = await SqliteEventLog.open(database)
        gate = await _hold_the_writer(database)  # every store's job waits in the writer's queue
        commits = database.commits
        writes = [
            agents.put(sample_agent("a")),
            requests.remember("r", b"f", "a", 1),
            turns.add("a", "t"),
            log.append(1, "a", b"e"),
        ]
        await asyncio.sleep(0)  # the stores flush at the end of the loop turn
        gate.set()
        await asyncio.gather(*writes)
        assert database.commits == commits + 2  # the gate's, then one for all four stores
    finally:
        await database.close()


def _version_1_database_with_one_agent(state: Path) -> None:
    state.mkdir(parents=True)
    conn = sqlite3.connect(state / DB_FILE)
    first = MIGRATIONS[0]
    assert isinstance(first, str)  # the first migration is a plain SQL script
    conn.executescript(first)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO agents VALUES (?, ?, 0)", ("old", AgentCodec.encode(sample_agent("old")))
    )
    conn.commit()
    conn.close()


async def test_a_version_1_database_migrates_and_keeps_its_agent_records(state: Path) -> None:
    _version_1_database_with_one_agent(state)
    database = await Database.open(state)
    try:
        assert database.opened_version == 1
        agents = await _agents(database)
        await agents.put(sample_agent("new"))
        assert [a.id for a in (await agents.load_headers()).agents] == ["old", "new"]
    finally:
        await database.close()
