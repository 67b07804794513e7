"""REPLACE whose cancel the provider refuses, through the wire (docs/design.md#turns):
SendPrompt answers FAILED_PRECONDITION / PROVIDER_REFUSED_INTERRUPT, the running turn
goes on and ends as written, and the replacing prompt was never stored."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, prompt_request, text
from tests.support.daemon import DaemonThread

SETTLE_MS = 10_000  # tests/conftest.py's settle_s


async def test_a_replace_the_provider_refuses_to_make_room_for_is_abandoned(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(
            agent_id=agent_id, content=text("/refuse-interrupt", "/sleep 30707", "/reply kept")
        )
    )
    await asyncio.to_thread(daemon.clock.wait_for_timer, 30707)
    replace = asyncio.ensure_future(
        stubs.turns.SendPrompt(
            prompt_request(agent_id, "/reply instead", if_running=turn_pb.IF_RUNNING_REPLACE)
        )
    )
    await asyncio.to_thread(daemon.clock.wait_for_timer, SETTLE_MS)
    await daemon.advance_async(SETTLE_MS)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await replace
    details = error_details(refused.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PROVIDER_REFUSED_INTERRUPT",
    )
    await daemon.advance_async(30707 - SETTLE_MS)
    events = [e async for e in call]
    assert events[-1].WhichOneof("event") == "turn_completed"
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    texts = [r.item.user_message.text or r.item.assistant_message.text for r in page.rows]
    assert "/reply instead" not in texts and texts[-1] == "kept"
