"""Bad input on every RPC: a clear status with details, and no state change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, prompt_request, text

INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def expect(
    call: Awaitable[Any], code: grpc.StatusCode, reason: str = "", field: str = ""
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    details = error_details(info.value)
    assert details.code == code, details
    assert details.message
    if reason:
        assert details.reason == reason, details
    if field:
        assert any(f.startswith(field) for f in details.fields), details


@pytest.fixture
async def stubs(aio_channel: grpc.aio.Channel) -> Stubs:
    return Stubs.of(aio_channel)


async def count_agents(stubs: Stubs) -> int:
    return len((await stubs.agents.ListAgents(agent_pb.ListAgentsRequest(page_size=1000))).agents)


CreateCase = Callable[[str], agent_pb.CreateAgentRequest]
CREATE_CASES: list[tuple[str, CreateCase, str, str]] = [
    (
        "no provider",
        lambda cwd: agent_pb.CreateAgentRequest(cwd=cwd),
        "INVALID_ARGUMENT",
        "provider",
    ),
    ("unknown provider", lambda cwd: create_request(cwd, provider="nope"), "UNKNOWN_PROVIDER", ""),
    ("no cwd", lambda cwd: create_request(""), "INVALID_ARGUMENT", "cwd"),
    ("relative cwd", lambda cwd: create_request("rel/dir"), "INVALID_ARGUMENT", "cwd"),
    ("missing cwd", lambda cwd: create_request(cwd + "/missing"), "INVALID_ARGUMENT", "cwd"),
    (
        "bad label",
        lambda cwd: create_request(cwd, labels={"a=b": "x"}),
        "INVALID_ARGUMENT",
        "labels",
    ),
    ("unknown mode", lambda cwd: create_request(cwd, mode="yolo"), "INVALID_ARGUMENT", "mode"),
    ("unknown model", lambda cwd: create_request(cwd, model="gpt-0"), "INVALID_ARGUMENT", "model"),
    ("long title", lambda cwd: create_request(cwd, title="x" * 5000), "INVALID_ARGUMENT", "title"),
    (
        "unknown directive in initial prompt",
        lambda cwd: create_request(cwd, initial_prompt=text("/frobnicate")),
        "INVALID_ARGUMENT",
        "content",
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "reason", "field"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES]
)
async def test_invalid_create_is_rejected_and_creates_nothing(
    stubs: Stubs, tmp_path: Any, name: str, make: CreateCase, reason: str, field: str
) -> None:
    before = await count_agents(stubs)
    await expect(stubs.agents.CreateAgent(make(str(tmp_path))), INVALID, reason, field)
    assert await count_agents(stubs) == before


async def test_unknown_agent_is_not_found_on_every_agent_rpc(stubs: Stubs) -> None:
    nf = grpc.StatusCode.NOT_FOUND
    await expect(
        stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id="ghost")), nf, "AGENT_NOT_FOUND"
    )
    await expect(
        stubs.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id="ghost")), nf, "AGENT_NOT_FOUND"
    )
    await expect(
        stubs.agents.UpdateAgent(agent_pb.UpdateAgentRequest(agent_id="ghost", title="t")),
        nf,
        "AGENT_NOT_FOUND",
    )
    await expect(stubs.turns.SendPrompt(prompt_request("ghost", "hi")), nf, "AGENT_NOT_FOUND")
    await expect(
        stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id="ghost")), nf, "AGENT_NOT_FOUND"
    )
    await expect(
        stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id="ghost")),
        nf,
        "AGENT_NOT_FOUND",
    )
    stream = stubs.turns.StreamTurn(turn_pb.StreamTurnRequest(agent_id="ghost", content=text("hi")))
    await expect(stream.read(), nf, "AGENT_NOT_FOUND")


async def test_empty_agent_id_is_invalid_argument(stubs: Stubs) -> None:
    await expect(stubs.agents.GetAgent(agent_pb.GetAgentRequest()), INVALID, field="agent_id")
    await expect(stubs.turns.SendPrompt(prompt_request("", "hi")), INVALID, field="agent_id")


async def test_bad_prompts_are_rejected_before_anything_is_stored(
    stubs: Stubs, tmp_path: Any
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    bad = [
        turn_pb.SendPromptRequest(agent_id=agent.id),
        prompt_request(agent.id, "   "),
        prompt_request(agent.id, "/frobnicate now"),
        prompt_request(agent.id, "/sleep soon"),
        prompt_request(agent.id, '/tool read {"path": '),
        turn_pb.SendPromptRequest(
            agent_id=agent.id,
            content=[
                content_pb.ContentPart(image=content_pb.Image(mime_type="text/plain", data=b"x"))
            ],
        ),
        prompt_request(agent.id, "x" * 2_000_000),
        prompt_request(agent.id, "hi", if_running=99),
    ]
    for request in bad:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stubs.turns.SendPrompt(request)
        assert info.value.code() in (INVALID, grpc.StatusCode.RESOURCE_EXHAUSTED), info.value
    after = (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent.id))).agent
    assert after.lifecycle.WhichOneof("state") == "idle"
    assert after.timeline.next_seq == 1
    assert after.updated_at == agent.updated_at


async def test_queue_on_an_idle_agent_just_starts_the_turn(stubs: Stubs, tmp_path: Any) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    # QUEUE on an idle agent just starts the turn (test_prompt_queue.py covers a busy one).
    started = await stubs.turns.SendPrompt(
        prompt_request(agent.id, "hi", if_running=turn_pb.IF_RUNNING_QUEUE)
    )
    assert started.disposition == turn_pb.PROMPT_DISPOSITION_STARTED


async def test_bad_imports_are_refused_with_details_and_create_nothing(
    stubs: Stubs, tmp_path: Any
) -> None:
    def importing(provider: str, session_id: str, cwd: str) -> agent_pb.ImportAgentRequest:
        return agent_pb.ImportAgentRequest(
            provider=provider, provider_session_id=session_id, cwd=cwd
        )

    before = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest(include_archived=True))
    cwd = str(tmp_path)
    imports = stubs.agents.ImportAgent
    await expect(imports(importing("", "s-1", cwd)), INVALID, field="provider")
    await expect(imports(importing("nope", "s-1", cwd)), INVALID, "UNKNOWN_PROVIDER", "provider")
    await expect(imports(importing("scripted", "", cwd)), INVALID, field="provider_session_id")
    await expect(imports(importing("scripted", "s-1", "rel")), INVALID, field="cwd")
    # The scripted provider keeps no sessions to import.
    precondition = grpc.StatusCode.FAILED_PRECONDITION
    await expect(imports(importing("scripted", "s-1", cwd)), precondition, "IMPORT_UNSUPPORTED")
    after = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest(include_archived=True))
    assert after == before


async def test_bad_timeline_requests_are_invalid_argument(stubs: Stubs, tmp_path: Any) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    fetch = stubs.timeline.FetchTimeline
    before = tl_pb.TIMELINE_DIRECTION_BEFORE
    await expect(
        fetch(tl_pb.FetchTimelineRequest(agent_id=agent.id, direction=before)),
        INVALID,
        field="cursor",
    )
    await expect(
        fetch(tl_pb.FetchTimelineRequest(agent_id=agent.id, direction=42)),  # type: ignore[arg-type]
        INVALID,
        field="direction",
    )
    future = timeline_pb2.Cursor(epoch=agent.timeline.epoch, seq=99)
    await expect(
        fetch(tl_pb.FetchTimelineRequest(agent_id=agent.id, direction=before, cursor=future)),
        INVALID,
        field="cursor",
    )


async def test_bad_update_mask_and_selector_are_invalid_argument(
    stubs: Stubs, tmp_path: Any
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    await expect(
        stubs.agents.UpdateAgent(
            agent_pb.UpdateAgentRequest(
                agent_id=agent.id, update_mask=field_mask_pb2.FieldMask(paths=["cwd"])
            )
        ),
        INVALID,
        field="update_mask",
    )
    await expect(stubs.agents.UpdateAgent(agent_pb.UpdateAgentRequest(agent_id=agent.id)), INVALID)
    await expect(
        stubs.agents.ListAgents(agent_pb.ListAgentsRequest(label_selector="a=b,,")), INVALID
    )
    await expect(stubs.agents.ListAgents(agent_pb.ListAgentsRequest(page_token="bogus")), INVALID)
    await expect(stubs.agents.ListAgents(agent_pb.ListAgentsRequest(page_size=5000)), INVALID)
    unchanged = (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent.id))).agent
    assert unchanged == agent


async def test_bad_subscribe_is_invalid_argument(stubs: Stubs) -> None:
    stream = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=["a", "a"]))
    await expect(stream.read(), INVALID)


async def test_update_rejects_an_unknown_mode_or_model_and_changes_nothing(
    stubs: Stubs, tmp_path: Any
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    for field in ("mode", "model"):
        request = agent_pb.UpdateAgentRequest(
            agent_id=agent.id, update_mask=field_mask_pb2.FieldMask(paths=[field])
        )
        setattr(request, field, "yolo")
        await expect(stubs.agents.UpdateAgent(request), INVALID, field=field)
    plan = agent_pb.UpdateAgentRequest(
        agent_id=agent.id, mode="plan", update_mask=field_mask_pb2.FieldMask(paths=["mode"])
    )
    assert (await stubs.agents.UpdateAgent(plan)).agent.mode == "plan"


async def test_an_unknown_provider_names_the_field(stubs: Stubs, tmp_path: Any) -> None:
    await expect(
        stubs.agents.CreateAgent(create_request(str(tmp_path), provider="nope")),
        INVALID,
        "UNKNOWN_PROVIDER",
        "provider",
    )


async def test_errors_about_huge_input_stay_small_enough_for_any_client(stubs: Stubs) -> None:
    huge = "x" * 10_000
    await expect(
        stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=huge)), INVALID, field="agent_id"
    )
    many = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[""] * 2000))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await many.read()
    details = error_details(info.value)
    assert details.code == INVALID
    assert len(details.fields) <= 9 and len(details.message.encode()) <= 512


@pytest.mark.parametrize(
    ("method", "streaming"),
    [
        ("/corral.v1.AgentService/CreateAgent", False),
        ("/corral.v1.TurnService/SendPrompt", False),
        ("/corral.v1.TurnService/StreamTurn", True),
        ("/corral.v1.EventService/Subscribe", True),
        ("/corral.v1.EventService/Heartbeat", False),
    ],
)
async def test_an_undecodable_request_is_invalid_argument_with_details(
    aio_channel: grpc.aio.Channel, method: str, streaming: bool
) -> None:
    garbage = b"\x0a\xff\xff\xff\xff\x0f\x01"  # a length far past the end of the body
    identity = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    if streaming:
        call: Any = aio_channel.unary_stream(method, **identity)(garbage)
        await expect(call.read(), INVALID, "MALFORMED_REQUEST")
    else:
        await expect(
            aio_channel.unary_unary(method, **identity)(garbage), INVALID, "MALFORMED_REQUEST"
        )
