"""A commit that fails (a full disk, an I/O error) loses nothing a client was told and tells no
client anything that was lost (docs/design.md#durability: the joint commits of store/commits.py):
a row's event goes to the event log in the row's transaction, so when the transaction fails
the turn fails (WRITER_FAILED), the rows' events are discarded, and the event log retries the
rest under contiguous revisions. A subscriber sees no gap and no row the timeline lacks, and a
resume from revision 0 replays exactly what it saw."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.hub.log_writer import RETRY_FIRST_S
from corral_server.store import timeline_tables
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread


class FailOnce:
    """`_write_appends` that raises once, when armed, as SQLite does on a full disk."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.armed = False
        self.failed = 0

    def __call__(self, *args: Any) -> None:
        if self.armed:
            self.armed = False
            self.failed += 1
            raise sqlite3.OperationalError("database or disk is full")
        self.real(*args)


async def events_until(
    call: Any, predicate: Any, out: list[event_pb.Event]
) -> list[event_pb.Event]:
    while not any(predicate(e) for e in out):
        response = await asyncio.wait_for(call.read(), 10)
        assert response is not grpc.aio.EOF
        out += response.events
    return out


def idle(agent_id: str) -> Any:
    def check(e: event_pb.Event) -> bool:
        return (
            e.HasField("agent_upserted")
            and e.agent_upserted.agent.id == agent_id
            and e.agent_upserted.agent.lifecycle.WhichOneof("state") == "idle"
            and e.revision > 0
        )

    return check


async def test_a_failed_row_commit_publishes_none_of_its_rows_and_leaves_no_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail = FailOnce(timeline_tables._write_appends)
    monkeypatch.setattr(timeline_tables, "_write_appends", fail)
    daemon = DaemonThread(Config(state_dir=tmp_path / "state")).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            watcher = stubs.events.Subscribe(event_pb.SubscribeRequest())
            seen: list[event_pb.Event] = []
            await events_until(watcher, lambda e: e.HasField("synced"), seen)
            incarnation = seen[-1].synced.incarnation
            # The prompt row commits; the next rows (the reply) fail with their events.
            await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 10\n/reply lost"))
            fail.armed = True
            await asyncio.to_thread(daemon.clock.wait_for_timer, 10)
            await daemon.advance_async(10)
            # The log writer waits out its back-off (on the daemon's clock), then goes on.
            assert daemon.daemon is not None
            writer = daemon.daemon.hub.log_writer
            assert writer is not None
            while fail.failed == 0 or writer.pending:
                await daemon.advance_async(round(RETRY_FIRST_S * 1000))
            waited = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            assert waited.agent.last_error.code == "WRITER_FAILED"
            await stubs.turns.SendPrompt(prompt_request(agent_id, "/reply kept"))
            await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            await events_until(watcher, lambda e: e.HasField("turn_completed"), seen)
            await events_until(watcher, idle(agent_id), seen)
            watcher.cancel()
            live = [e for e in seen if e.revision]
            assert [e.revision for e in live] == list(
                range(live[0].revision, live[-1].revision + 1)
            )
            page = await stubs.timeline.FetchTimeline(
                tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
            )
            stored = {r.seq: r for r in page.rows}
            shown = [e.timeline_row_appended for e in live if e.HasField("timeline_row_appended")]
            assert [a.row.seq for a in shown] == sorted(stored)  # every row once, none lost
            assert all(stored[a.row.seq] == a.row for a in shown)
            texts = [r.item.assistant_message.text for r in page.rows]
            assert "lost" not in texts and "kept" in texts
            # The log holds exactly what was published.
            replay = stubs.events.Subscribe(
                event_pb.SubscribeRequest(resume_revision=0, resume_incarnation=incarnation)
            )
            replayed = await events_until(replay, lambda e: e.HasField("synced"), [])
            replay.cancel()
            by_revision = {e.revision: e.SerializeToString() for e in replayed if e.revision}
            assert [by_revision.get(e.revision) for e in live] == [
                e.SerializeToString() for e in live
            ]
    finally:
        daemon.stop()
