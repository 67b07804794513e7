"""Queued prompts' content in SQLite (store/queued_prompts.py): stored once beside the agent
record, which keeps only their summaries; joined back at load; rewritten when a prompt is
queued again under the same id; still stored after a failed commit rolled it back, or after
its batch was rolled back for another job's fault and re-run alone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import content_pb2 as content_pb
from corral_server.domain.agent import Agent, QueuedPrompt
from corral_server.domain.content import ImagePart, TextPart
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import DB_FILE, Database
from corral_server.store.errors import StoreWriteFailed
from corral_server.store.event_log import SqliteEventLog
from tests.support.stores import AgentCodec, sample_agent

LONG = "é" * 100_000  # past the preview: the record cannot hold it


def queued(cm_id: str, text: str, *parts: ImagePart) -> QueuedPrompt:
    return QueuedPrompt(cm_id, (TextPart(text), *parts), 1_000)


async def reopened(state: Path) -> Agent:
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        [agent] = (await records.load_headers()).agents
        return agent
    finally:
        await database.close()


def stored(state: Path) -> tuple[int, int, list[str]]:
    """(bytes of the agent record, bytes of queued content, client_message_ids stored)."""
    with closing(sqlite3.connect(state / DB_FILE)) as conn, conn:
        record = conn.execute("SELECT sum(length(record)) FROM agents").fetchone()[0]
        content = conn.execute(
            "SELECT coalesce(sum(length(text)) + sum(coalesce(length(data), 0)), 0)"
            " FROM queued_prompts"
        ).fetchone()[0]
        ids = [r[0] for r in conn.execute("SELECT DISTINCT client_message_id FROM queued_prompts")]
    conn.close()  # `with` commits but does not close (Python 3.13 warns of the open connection)
    return record, content, sorted(ids)


async def test_a_queue_is_stored_once_and_comes_back_whole(tmp_path: Path) -> None:
    state = tmp_path / "state"
    queue = (
        queued("cm-1", LONG, ImagePart("image/png", b"\x89PNG" * 1000)),
        queued("cm-2", "short"),
    )
    agent = sample_agent("a", queued_prompts=queue)
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        for n in range(5):  # every rewrite of the record: the content is not written again
            await records.put(replace(agent, updated_at_ms=1_000 + n))
    finally:
        await database.close()
    record, content, ids = stored(state)
    assert record < 2_000 and content == len(LONG.encode()) + 4_000 + len("short")
    assert ids == ["cm-1", "cm-2"]
    assert (await reopened(state)).queued_prompts == queue


async def test_a_prompt_queued_again_under_its_id_is_stored_anew(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agent = sample_agent("a", queued_prompts=(queued("cm-1", LONG),))
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        await records.put(agent)
        await records.put(replace(agent, queued_prompts=(queued("cm-2", "b" * 300),)))
        again = replace(agent, queued_prompts=(queued("cm-2", "c" * 300),))
        # Removed and queued again, with other content, between two commits: one write.
        records.put(replace(agent, queued_prompts=()))
        await records.put(again)
    finally:
        await database.close()
    assert stored(state)[2] == ["cm-2"]
    assert (await reopened(state)).queued_prompts == again.queued_prompts


async def test_a_queue_rolled_back_by_a_failed_commit_is_written_again(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agent = sample_agent("a", queued_prompts=(queued("cm-1", LONG),))
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        log = await SqliteEventLog.open(database)
        await log.append(1, "a", b"one")
        # A stray row where revision 2 goes fails the transaction the queue is written in.
        await database.write(
            lambda conn: conn.execute(
                "INSERT INTO event_runs VALUES (2, 1, 'x', NULL, NULL, x'00')"
            )
        )
        put, append = records.put(agent), log.append(2, "a", b"two")
        for future in (put, append):
            with pytest.raises(StoreWriteFailed):
                await future
        await asyncio.sleep(0)
        await records.put(replace(agent, updated_at_ms=2_000))  # the same queue, same objects
    finally:
        await database.close()
    assert (await reopened(state)).queued_prompts == agent.queued_prompts


async def test_deleting_an_agent_deletes_its_queued_prompts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        await records.put(sample_agent("a", queued_prompts=(queued("cm-1", LONG),)))
        await records.delete("a")
    finally:
        await database.close()
    assert stored(state)[1:] == (0, [])


async def test_a_queue_stored_whole_in_an_older_record_moves_to_the_table(tmp_path: Path) -> None:
    """A record written before queued prompts had a table holds their content; the next write
    of the agent stores it in the table, so it survives the record becoming a summary."""
    state = tmp_path / "state"
    old = agent_pb.Agent(id="a", provider="scripted", cwd="/work")
    old.lifecycle.idle.SetInParent()
    old.timeline.epoch, old.timeline.next_seq = "epoch-1", 1
    old.queued_prompts.add(client_message_id="cm-1", content=[content_pb.ContentPart(text=LONG)])
    database = await Database.open(state)
    try:
        await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        row = ("a", old.SerializeToString(), 1)
        await database.write(
            lambda conn: conn.execute(
                "INSERT INTO agents (agent_id, record, updated_ms, created_order)"
                " VALUES (?, ?, ?, 1)",
                row,
            )
        )
    finally:
        await database.close()
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        [agent] = (await records.load_headers()).agents
        assert agent.queued_prompts[0].content == (TextPart(LONG),)
        await records.put(replace(agent, updated_at_ms=2_000))
    finally:
        await database.close()
    assert stored(state)[2] == ["cm-1"]
    assert (await reopened(state)).queued_prompts[0].content == (TextPart(LONG),)


async def test_a_queue_in_a_batch_rolled_back_for_another_job_is_stored_by_its_rerun(
    tmp_path: Path,
) -> None:
    """The database re-runs a failed batch one job per transaction: the queue's write runs
    twice, and the second run must not take the first (rolled back) for done."""
    state = tmp_path / "state"
    agent = sample_agent("a", queued_prompts=(queued("cm-1", LONG),))
    database = await Database.open(state)
    try:
        records = await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)
        loop = asyncio.get_running_loop()
        entered: asyncio.Future[None] = loop.create_future()
        gate = threading.Event()

        def hold(_: object) -> None:
            loop.call_soon_threadsafe(entered.set_result, None)
            gate.wait(10)

        database.submit(hold, lambda _: None, lambda _: None)
        await entered  # the writer is busy: the next jobs wait for it, as one batch
        put = records.put(agent)
        await asyncio.sleep(0)  # the records' job is submitted
        culprit = asyncio.ensure_future(
            database.write(lambda conn: conn.execute("INSERT INTO nowhere VALUES (1)"))
        )
        await asyncio.sleep(0)  # submitted too, behind the records' job
        gate.set()
        await put
        with pytest.raises(StoreWriteFailed):
            await culprit
    finally:
        await database.close()
    assert (await reopened(state)).queued_prompts == agent.queued_prompts
