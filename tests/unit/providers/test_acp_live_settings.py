"""An ACP agent's mode changed live through the wire (docs/design.md#live-config): UpdateAgent
sends `session/set_mode` to an agent whose `session/new` offered modes, and the agent's own
`current_mode_update` is drained before the answer; a mode it does not offer, or a model (it
offers none), is FAILED_PRECONDITION with the reason."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import serving_stubs
from tests.unit.providers.test_acp_provider import stub


async def update(stubs: Stubs, agent_id: str, field: str, value: str) -> svc_pb.UpdateAgentResponse:
    request = svc_pb.UpdateAgentRequest(
        agent_id=agent_id, update_mask=field_mask_pb2.FieldMask(paths=[field])
    )
    setattr(request, field, value)
    reply: svc_pb.UpdateAgentResponse = await stubs.agents.UpdateAgent(request, timeout=30)
    return reply


async def reply_to(stubs: Stubs, agent_id: str) -> str:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("which mode?"))
    events = [e async for e in stubs.turns.StreamTurn(request)]
    assert events[-1].WhichOneof("event") == "turn_completed"
    rows = [e.row.item for e in events if e.HasField("row")]
    return "".join(r.assistant_message.text for r in rows if r.HasField("assistant_message"))


async def test_set_mode_reaches_the_agent_and_what_it_cannot_is_refused(tmp_path: Path) -> None:
    async with serving_stubs(Config(extra_providers={"stub": stub("modes")})) as stubs:
        created = await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="stub"))
        agent_id = created.agent.id
        assert await reply_to(stubs, agent_id) == "mode=ask"
        assert (await update(stubs, agent_id, "mode", "code")).agent.mode == "code"
        assert await reply_to(stubs, agent_id) == "mode=code"
        for field, value, said in (
            ("mode", "warp", "offers no mode 'warp' (it offers ask, code)"),
            ("model", "big-1", "offers no models"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await update(stubs, agent_id, field, value)
            details = error_details(raised.value)
            assert details.code is grpc.StatusCode.FAILED_PRECONDITION
            assert details.reason == "SETTINGS_NOT_LIVE" and said in details.message
        got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
        assert (got.agent.mode, got.agent.model) == ("code", "")
