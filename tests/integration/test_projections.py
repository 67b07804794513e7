"""The projected view through the wire (docs/design.md#projections): FetchTimeline pages of
entries with exact source ranges, a projected Subscribe whose entries change in place as rows
fold into them, and projections recomputed from the stored rows after a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import DaemonThread

PROJECTED = timeline_pb.TIMELINE_VIEW_PROJECTED
TAIL, BEFORE, AFTER = (
    tl_pb.TIMELINE_DIRECTION_TAIL,
    tl_pb.TIMELINE_DIRECTION_BEFORE,
    tl_pb.TIMELINE_DIRECTION_AFTER,
)
COMPLETED = timeline_pb.TOOL_CALL_STATUS_COMPLETED
# Rows: 1 the prompt, 2 the call RUNNING, 3 and 4 one message stored in two rows (the sleep
# lets the coalescer's window pass between them), 5 the call COMPLETED, 6 the last reply.
SCRIPT = (
    '/tool-start read {"path": "a.txt"}',
    "/sleep 100",
    "/reply one.",
    "/sleep 100",
    "/reply+ two",
    "/sleep 100",
    "/tool-end read",
    "/reply done",
)
EXPECTED = [(1, [(1, 1)]), (2, [(2, 2), (5, 5)]), (3, [(3, 4)]), (6, [(6, 6)])]


def shape(entries: Any) -> list[tuple[int, list[tuple[int, int]]]]:
    return [(e.seq, [(r.start, r.end) for r in e.source_ranges]) for e in entries]


async def run_turn(daemon: DaemonThread, stubs: Stubs, agent_id: str) -> None:
    """Runs SCRIPT to its end, moving the daemon's clock past each sleep."""
    await stubs.turns.SendPrompt(
        turn_pb.SendPromptRequest(agent_id=agent_id, content=text(*SCRIPT))
    )
    await drive_until(daemon, stubs, agent_id, 6)


async def drive_until(daemon: DaemonThread, stubs: Stubs, agent_id: str, rows: int) -> None:
    """Moves the daemon's clock a sleep at a time until the timeline holds `rows` rows (and,
    at the last row, the turn has ended)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        await daemon.advance_async(100)  # a no-op until the provider sleeps
        agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
        idle = rows < 6 or agent.lifecycle.WhichOneof("state") == "idle"
        if (await fetch(stubs, agent_id)).window.max_seq == rows and idle:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the timeline did not reach {rows} rows")


async def agent_after_script(
    daemon: DaemonThread, channel: grpc.aio.Channel, cwd: Path
) -> tuple[Stubs, str]:
    """A new agent that has run SCRIPT."""
    stubs = Stubs.of(channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
    await run_turn(daemon, stubs, agent_id)
    return stubs, agent_id


async def fetch(
    stubs: Stubs, agent_id: str, direction: tl_pb.TimelineDirection.ValueType = TAIL, **kw: Any
) -> Any:
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, direction=direction, **kw)
    return await stubs.timeline.FetchTimeline(request)


def assert_folded(entries: Any) -> None:
    assert shape(entries) == EXPECTED
    call, message = entries[1].item.tool_call, entries[2].item.assistant_message
    assert (call.name, call.status) == ("read", COMPLETED)
    assert call.input.struct_value["path"] == "a.txt"  # only the RUNNING row carried it
    assert call.output.struct_value["ok"]
    assert message.text == "one.two"
    assert entries[1].updated.ToMilliseconds() >= entries[1].timestamp.ToMilliseconds()


async def test_a_projected_page_folds_a_call_and_a_message_and_names_their_rows(
    daemon: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs, agent_id = await agent_after_script(daemon, aio_channel, tmp_path)
    raw = await fetch(stubs, agent_id)
    assert [r.seq for r in raw.rows] == [1, 2, 3, 4, 5, 6] and not raw.entries
    page = await fetch(stubs, agent_id, view=PROJECTED)
    assert_folded(page.entries)
    assert not page.rows and page.epoch == raw.epoch and page.window == raw.window
    assert (page.start_cursor.seq, page.end_cursor.seq) == (1, 6)
    assert not page.has_older and not page.has_newer
    # Every source range opens the same rows in the raw view.
    for entry in page.entries:
        for r in entry.source_ranges:
            cursor = timeline_pb.Cursor(epoch=page.epoch, seq=r.start - 1)
            rows = await fetch(stubs, agent_id, AFTER, cursor=cursor, limit=r.end - r.start + 1)
            assert [row.seq for row in rows.rows] == list(range(r.start, r.end + 1))


async def test_pages_of_one_entry_cut_through_the_call_and_still_give_each_entry_once(
    daemon: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs, agent_id = await agent_after_script(daemon, aio_channel, tmp_path)
    epoch = (await fetch(stubs, agent_id)).epoch
    forward, cursor = [], timeline_pb.Cursor(epoch=epoch, seq=0)
    while True:
        page = await fetch(stubs, agent_id, AFTER, cursor=cursor, limit=1, view=PROJECTED)
        forward.extend(page.entries)
        if not page.has_newer:
            break
        cursor = page.end_cursor
    assert_folded(forward)  # the call's page ends at seq 2 and still carries row 5
    backward: list[Any] = []
    page = await fetch(stubs, agent_id, TAIL, limit=1, view=PROJECTED)
    while True:
        backward[:0] = page.entries
        if not page.has_older:
            break
        page = await fetch(
            stubs, agent_id, BEFORE, cursor=page.start_cursor, limit=1, view=PROJECTED
        )
    assert_folded(backward)


async def test_an_unknown_view_is_refused(aio_channel: grpc.aio.Channel, tmp_path: Path) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    try:
        await fetch(stubs, agent_id, view=7)
    except grpc.aio.AioRpcError as error:
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert error_details(error).fields == ("view",)
    else:
        raise AssertionError("an unknown view was answered")


async def upserts_until_idle(call: Any, agent_id: str) -> list[Any]:
    """The stream's entry upserts for `agent_id` until its turn completes; no raw rows."""
    seen: list[Any] = []
    async for response in call:
        for event in response.events:
            kind = event.WhichOneof("payload")
            assert kind != "timeline_row_appended"
            if (
                kind == "timeline_entry_upserted"
                and event.timeline_entry_upserted.agent_id == agent_id
            ):
                seen.append(event.timeline_entry_upserted)
            if kind == "turn_completed" and event.turn_completed.agent_id == agent_id:
                return seen
    raise AssertionError("the stream ended")


async def test_a_projected_subscriber_sees_entries_change_in_place(
    daemon: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    call = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id], view=PROJECTED))
    async for response in call:  # the snapshot, up to `synced`
        if any(e.WhichOneof("payload") == "synced" for e in response.events):
            break
    turn = asyncio.ensure_future(run_turn(daemon, stubs, agent_id))
    upserts = await upserts_until_idle(call, agent_id)
    await turn
    call.cancel()
    assert [(u.row_seq, u.entry.seq) for u in upserts] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 3),
        (5, 2),
        (6, 6),
    ]
    by_seq = {u.entry.seq: u.entry for u in upserts}  # what a client holds: the latest of each
    assert_folded([by_seq[seq] for seq in sorted(by_seq)])
    assert upserts[1].entry.item.tool_call.status == timeline_pb.TOOL_CALL_STATUS_RUNNING
    assert upserts[2].entry.item.assistant_message.text == "one."
    # What the stream gave is what a projected page gives.
    page = await fetch(stubs, agent_id, view=PROJECTED)
    assert [by_seq[seq] for seq in sorted(by_seq)] == list(page.entries)


async def test_a_projected_stream_that_starts_mid_entry_folds_into_the_stored_rows(
    daemon: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await stubs.turns.SendPrompt(
        turn_pb.SendPromptRequest(agent_id=agent_id, content=text(*SCRIPT))
    )
    await drive_until(daemon, stubs, agent_id, 3)  # the call is RUNNING, "one." is stored
    call = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id], view=PROJECTED))
    async for response in call:  # the snapshot, up to `synced`
        if any(e.WhichOneof("payload") == "synced" for e in response.events):
            break
    turn = asyncio.ensure_future(drive_until(daemon, stubs, agent_id, 6))
    upserts = await upserts_until_idle(call, agent_id)
    await turn
    call.cancel()
    later = {u.row_seq: u.entry for u in upserts}
    assert sorted(later) == [4, 5, 6]
    assert (
        shape([later[4]]) == [(3, [(3, 4)])] and later[4].item.assistant_message.text == "one.two"
    )
    assert shape([later[5]]) == [(2, [(2, 2), (5, 5)])]


async def test_projections_are_the_same_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            await run_turn(first, stubs, agent_id)
            before = await fetch(stubs, agent_id, view=PROJECTED)
    finally:
        first.stop()
    second = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            after = await fetch(Stubs.of(channel), agent_id, view=PROJECTED)
    finally:
        second.stop()
    assert_folded(after.entries)
    assert after == before


async def test_a_stale_cursor_resets_to_the_projected_tail(
    daemon: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs, agent_id = await agent_after_script(daemon, aio_channel, tmp_path)
    stale = timeline_pb.Cursor(epoch="0" * 32, seq=3)
    page = await fetch(stubs, agent_id, AFTER, cursor=stale, view=PROJECTED)
    assert page.reset and page.stale_cursor and not page.gap
    assert_folded(page.entries)
    empty = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    nothing = await fetch(stubs, empty, view=PROJECTED)
    assert not nothing.entries and not nothing.has_older and not nothing.has_newer
    assert not nothing.HasField("start_cursor")
