"""The history gate through the wire (docs/design.md#resume), on the scripted provider's
`/history N` (it replays N items of an earlier conversation, flagged `from_history`, naming the
running turn): the rows are stored with no turn id, subscribers see only their
`timeline_row_appended`, and the running turn, the agent's state and its `updated_at` are
untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread

HISTORY = ["earlier prompt 1", "earlier reply 2", "earlier prompt 3"]


def row_text(row: Any) -> str:
    item = row.item
    return str(item.user_message.text or item.assistant_message.text)


async def events_until_history(watch: Any, count: int) -> list[Any]:
    """Every event of `watch` (after its `synced`) up to the `count`-th history row."""
    seen: list[Any] = []
    synced = False
    async for response in watch:
        for event in response.events:
            if event.HasField("synced"):
                synced = True
                continue
            if not synced:
                continue
            seen.append(event)
            appended = [
                e.timeline_row_appended for e in seen if e.HasField("timeline_row_appended")
            ]
            if sum(row_text(a.row).startswith("earlier") for a in appended) == count:
                return seen
    raise AssertionError("the stream ended")


async def test_replayed_history_is_stored_silently_outside_the_running_turn(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(
            agent_id=agent_id, content=text("/history 3", "/sleep 6101", "/reply live")
        )
    )
    try:
        seen = await events_until_history(watch, len(HISTORY))
    finally:
        watch.cancel()
    await asyncio.to_thread(daemon.clock.wait_for_timer, 6101)

    # What subscribers saw after the prompt's row: the history rows, and nothing else.
    kinds = [e.WhichOneof("payload") for e in seen]
    prompt_at = next(
        i
        for i, e in enumerate(seen)
        if e.HasField("timeline_row_appended")
        and e.timeline_row_appended.row.item.HasField("user_message")
        and not row_text(e.timeline_row_appended.row).startswith("earlier")
    )
    assert kinds[prompt_at + 1 :] == ["timeline_row_appended"] * len(HISTORY)
    replayed = [e.timeline_row_appended.row for e in seen[prompt_at + 1 :]]
    assert [row_text(r) for r in replayed] == HISTORY
    assert {r.turn_id for r in replayed} == {""}  # the turn they named is not theirs

    # The agent is as the turn's start left it: running that turn, updated_at unchanged.
    last_upsert = [e.agent_upserted.agent for e in seen if e.HasField("agent_upserted")][-1]
    turn_id = last_upsert.lifecycle.running.active_turn_id
    assert turn_id
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.lifecycle.running.active_turn_id == turn_id
    assert agent.updated_at == last_upsert.updated_at
    assert agent.timeline.next_seq == replayed[-1].seq + 1

    # The turn goes on and ends as written; its stream never carried the history.
    await daemon.advance_async(6101)
    events = [e async for e in call]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_completed"
    streamed = [e.row for e in events if e.HasField("row")]
    assert [row_text(r) for r in streamed] == ["/history 3\n/sleep 6101\n/reply live", "live"]

    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    assert [(r.seq, r.turn_id, row_text(r)) for r in page.rows] == [
        (1, turn_id, "/history 3\n/sleep 6101\n/reply live"),
        (2, "", HISTORY[0]),
        (3, "", HISTORY[1]),
        (4, "", HISTORY[2]),
        (5, turn_id, "live"),
    ]
    assert [r.provider_message_id for r in page.rows[1:4]] == [
        f"{turn_id}-history-0-{n}" for n in (1, 2, 3)
    ]
