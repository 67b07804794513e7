"""An interrupt the provider never answers, through the wire (docs/design.md#cancel), on the
scripted provider's `/hang-interrupt`: the daemon gives the interrupt up at `interrupt_s` (5 s on
its clock), counts it as not confirmed, waits `settle_s` (10 s) for the turn to end, and answers
REFUSED; the turn goes on and ends as written. REPLACE on such a turn is abandoned with
PROVIDER_REFUSED_INTERRUPT."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, prompt_request, text
from tests.support.daemon import DaemonThread

INTERRUPT_MS, SETTLE_MS = 5_000, 10_000  # tests/conftest.py's Timeouts


async def hanging_turn(
    stubs: Stubs, daemon: DaemonThread, cwd: Any, sleep_ms: int
) -> tuple[str, Any]:
    """An agent running a turn whose interrupts hang; (agent id, its StreamTurn call)."""
    agent_id = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(
            agent_id=agent_id, content=text("/hang-interrupt", f"/sleep {sleep_ms}", "/reply kept")
        )
    )
    await asyncio.to_thread(daemon.clock.wait_for_timer, sleep_ms)
    return str(agent_id), call


async def past_both_waits(daemon: DaemonThread) -> None:
    """Let the interrupt's deadline pass, then the settle wait that starts only after it."""
    await asyncio.to_thread(daemon.clock.wait_for_timer, INTERRUPT_MS)
    await daemon.advance_async(INTERRUPT_MS)
    await asyncio.to_thread(daemon.clock.wait_for_timer, SETTLE_MS)
    await daemon.advance_async(SETTLE_MS)


async def test_an_interrupt_that_never_answers_is_refused_and_the_turn_goes_on(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, call = await hanging_turn(stubs, daemon, tmp_path, 60_301)
    cancel = asyncio.ensure_future(
        stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    )
    await past_both_waits(daemon)
    answer = await cancel
    assert answer.outcome == turn_pb.CANCEL_OUTCOME_REFUSED
    turn_id = answer.agent.lifecycle.running.active_turn_id
    assert turn_id
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.lifecycle.running.active_turn_id == turn_id

    # The turn ends as written, never canceled: the provider never stopped it.
    await daemon.advance_async(60_301 - INTERRUPT_MS - SETTLE_MS)
    events = [e async for e in call]
    assert [e.WhichOneof("event") for e in events][-1] == "turn_completed"
    assert [e.row.item.assistant_message.text for e in events if e.HasField("row")][-1] == "kept"
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.lifecycle.WhichOneof("state") == "idle"


async def test_a_replace_of_a_turn_whose_interrupt_hangs_is_abandoned(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, call = await hanging_turn(stubs, daemon, tmp_path, 60_302)
    replace = asyncio.ensure_future(
        stubs.turns.SendPrompt(
            prompt_request(agent_id, "/reply instead", if_running=turn_pb.IF_RUNNING_REPLACE)
        )
    )
    await past_both_waits(daemon)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await replace
    details = error_details(refused.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PROVIDER_REFUSED_INTERRUPT",
    )
    await daemon.advance_async(60_302 - INTERRUPT_MS - SETTLE_MS)
    events = [e async for e in call]
    assert [e.WhichOneof("event") for e in events][-1] == "turn_completed"
