"""A projected Subscribe over Connect on the web port (proto and JSON) carries exactly the
projected events a gRPC client gets (docs/design.md#projections)."""

from __future__ import annotations

import contextlib
from typing import Any

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from tests.integration.test_web_connect import _grpc_until, _read_until, stubs, web, web_daemon
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.web import Stream, Web, grpc_synced, read_synced, stream_request

__all__ = ["stubs", "web", "web_daemon"]  # the fixtures this module shares


async def test_connect_projected_subscribe_gets_the_grpc_entries(
    web: Web, stubs: Stubs, tmp_path: Any
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    request = event_pb.SubscribeRequest(
        agent_ids=[agent.id], view=timeline_pb.TIMELINE_VIEW_PROJECTED
    )
    grpc_call = stubs.events.Subscribe(request)
    async with contextlib.AsyncExitStack() as stack:
        streams = []
        for json_codec in (False, True):
            response = await stack.enter_async_context(
                web.http.stream(
                    **stream_request("EventService/Subscribe", request, json_codec=json_codec)
                )
            )
            assert response.status_code == 200
            streams.append(Stream(response, event_pb.SubscribeResponse, json_codec))
        for stream in streams:
            await read_synced(stream)
        await grpc_synced(grpc_call)
        started = await stubs.turns.SendPrompt(prompt_request(agent.id, "/think a", "/reply b"))
        over_grpc = await _grpc_until(grpc_call, started.turn_id)
        kinds = [e.WhichOneof("payload") for e in over_grpc]
        assert "timeline_entry_upserted" in kinds and "timeline_row_appended" not in kinds
        for stream in streams:
            assert await _read_until(stream, started.turn_id) == over_grpc
        grpc_call.cancel()
