"""A provider that asks for more permissions at once than corral holds pending (64), through
the wire on the scripted provider's `/permissions N`: the turn fails clearly (turn_failed with
TOO_MANY_PERMISSIONS, an error row, the agent errored), its pending requests end canceled, and
the provider's turn is stopped, so the agent takes the next prompt."""

from __future__ import annotations

from typing import Any

import grpc

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, prompt_request, text
from tests.support.watch import Watch, is_

MAX_PENDING = 64  # manager/permissions.py


async def test_one_permission_too_many_fails_the_turn_and_the_agent_goes_on(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = await Watch(stubs, agent_id).synced()
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(
            agent_id=agent_id, content=text(f"/permissions {MAX_PENDING + 1}", "/reply never")
        )
    )
    try:
        events = [e async for e in call]
        failed = events[-1].turn_failed
        assert failed.error.code == "TOO_MANY_PERMISSIONS"
        assert f"more than {MAX_PENDING} permissions" in failed.error.message
        kinds = [e.WhichOneof("event") for e in events]
        assert kinds.count("permission_requested") == MAX_PENDING
        resolved = [e.permission_resolved for e in events if e.HasField("permission_resolved")]
        assert len(resolved) == MAX_PENDING and all(r.canceled for r in resolved)
        agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
        assert agent.lifecycle.errored.error.code == "TOO_MANY_PERMISSIONS"
        assert not agent.pending_permissions

        # The provider stopped the turn corral failed: the next prompt runs.
        again = await stubs.turns.SendPrompt(prompt_request(agent_id, "/reply again"))
        assert again.disposition == turn_pb.PROMPT_DISPOSITION_STARTED
        await watch.until(is_("turn_completed", again.turn_id))
    finally:
        watch.cancel()
