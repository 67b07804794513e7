"""AgentService through the wire: create, idempotency, get, list, update, close."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from tests.support.client import Stubs, create_request, error_details, prompt_request


@pytest.fixture(scope="module")
def grpc_stub_cls() -> Any:
    return agent_grpc.AgentServiceStub


def test_created_agent_is_idle_with_an_empty_timeline(grpc_stub: Any, tmp_path: Any) -> None:
    agent = grpc_stub.CreateAgent(create_request(str(tmp_path), title="first")).agent
    assert agent.id
    assert agent.lifecycle.WhichOneof("state") == "idle"
    assert agent.provider_session_id.startswith("scripted-")
    assert agent.timeline.epoch and agent.timeline.next_seq == 1
    assert agent.mode == "default" and agent.model
    fetched = grpc_stub.GetAgent(agent_pb.GetAgentRequest(agent_id=agent.id)).agent
    assert fetched == agent


def test_create_with_the_same_request_id_returns_the_same_agent(
    grpc_stub: Any, tmp_path: Any
) -> None:
    req = create_request(str(tmp_path), request_id="retry-1")
    first = grpc_stub.CreateAgent(req).agent
    second = grpc_stub.CreateAgent(req).agent
    assert first.id == second.id
    listed = grpc_stub.ListAgents(agent_pb.ListAgentsRequest(page_size=1000)).agents
    assert sum(1 for a in listed if a.id == first.id) == 1


def test_reusing_a_request_id_for_a_different_agent_is_already_exists(
    grpc_stub: Any, tmp_path: Any
) -> None:
    grpc_stub.CreateAgent(create_request(str(tmp_path), request_id="retry-2", title="a"))
    with pytest.raises(grpc.RpcError) as info:
        grpc_stub.CreateAgent(create_request(str(tmp_path), request_id="retry-2", title="b"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_concurrent_creates_with_one_request_id_make_one_agent(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    req = create_request(str(tmp_path), request_id="concurrent-1")
    results = await asyncio.gather(*(stubs.agents.CreateAgent(req) for _ in range(8)))
    assert len({r.agent.id for r in results}) == 1


def test_updated_at_strictly_increases_across_updates(grpc_stub: Any, tmp_path: Any) -> None:
    agent = grpc_stub.CreateAgent(create_request(str(tmp_path))).agent
    stamps = [agent.updated_at.ToNanoseconds()]
    for i in range(5):  # the FakeClock does not move: updates land in one millisecond
        updated = grpc_stub.UpdateAgent(
            agent_pb.UpdateAgentRequest(
                agent_id=agent.id,
                title=f"t{i}",
                update_mask=field_mask_pb2.FieldMask(paths=["title"]),
            )
        ).agent
        assert updated.title == f"t{i}"
        stamps.append(updated.updated_at.ToNanoseconds())
    assert stamps == sorted(set(stamps))


def test_update_labels_replaces_them_and_sets_the_parent(grpc_stub: Any, tmp_path: Any) -> None:
    parent = grpc_stub.CreateAgent(create_request(str(tmp_path))).agent
    agent = grpc_stub.CreateAgent(create_request(str(tmp_path), labels={"team": "a"})).agent
    updated = grpc_stub.UpdateAgent(
        agent_pb.UpdateAgentRequest(
            agent_id=agent.id,
            labels={"corral.parent-agent-id": parent.id, "x": "y"},
            update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
        )
    ).agent
    assert dict(updated.labels) == {"corral.parent-agent-id": parent.id, "x": "y"}
    assert updated.parent_agent_id == parent.id
    children = grpc_stub.ListAgents(agent_pb.ListAgentsRequest(parent_agent_id=parent.id)).agents
    assert [c.id for c in children] == [agent.id]


def test_a_parent_label_must_name_another_agent_without_a_cycle(
    grpc_stub: Any, tmp_path: Any
) -> None:
    root = grpc_stub.CreateAgent(create_request(str(tmp_path))).agent
    child = grpc_stub.CreateAgent(
        create_request(str(tmp_path), labels={"corral.parent-agent-id": root.id})
    ).agent
    for target, parent in ((root, child.id), (root, root.id), (child, "no-such-agent")):
        with pytest.raises(grpc.RpcError) as info:
            grpc_stub.UpdateAgent(
                agent_pb.UpdateAgentRequest(
                    agent_id=target.id,
                    labels={"corral.parent-agent-id": parent},
                    update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
                )
            )
        assert error_details(info.value).fields == ("labels['corral.parent-agent-id']",)
    again = grpc_stub.GetAgent(agent_pb.GetAgentRequest(agent_id=root.id)).agent
    assert again == root


def test_list_agents_pages_and_filters_by_label(grpc_stub: Any, tmp_path: Any) -> None:
    made = [
        grpc_stub.CreateAgent(
            create_request(str(tmp_path), labels={"suite": "paging", "n": str(i)})
        ).agent.id
        for i in range(5)
    ]
    seen: list[str] = []
    token = ""
    while True:
        page = grpc_stub.ListAgents(
            agent_pb.ListAgentsRequest(page_size=2, page_token=token, label_selector="suite=paging")
        )
        assert len(page.agents) <= 2
        seen.extend(a.id for a in page.agents)
        token = page.next_page_token
        if not token:
            break
    assert seen == made
    odd = grpc_stub.ListAgents(
        agent_pb.ListAgentsRequest(label_selector="suite=paging,n!=0,n!=2,n!=4")
    )
    assert [a.id for a in odd.agents] == [made[1], made[3]]


def test_close_returns_the_closed_snapshot_and_get_still_works(
    grpc_stub: Any, tmp_path: Any
) -> None:
    agent = grpc_stub.CreateAgent(create_request(str(tmp_path))).agent
    closed = grpc_stub.CloseAgent(agent_pb.CloseAgentRequest(agent_id=agent.id)).agent
    assert closed.lifecycle.WhichOneof("state") == "closed"
    assert closed.lifecycle.closed.closed_at.ToMilliseconds() > 0
    again = grpc_stub.GetAgent(agent_pb.GetAgentRequest(agent_id=agent.id)).agent
    assert again.lifecycle.WhichOneof("state") == "closed"


async def test_concurrent_closes_share_one_outcome(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    results = await asyncio.gather(
        *(stubs.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id=agent.id)) for _ in range(5))
    )
    assert len({r.agent.SerializeToString() for r in results}) == 1
    assert results[0].agent.lifecycle.WhichOneof("state") == "closed"


def test_a_closed_agent_refuses_prompts(grpc_stub: Any, grpc_channel: Any, tmp_path: Any) -> None:
    agent = grpc_stub.CreateAgent(create_request(str(tmp_path))).agent
    grpc_stub.CloseAgent(agent_pb.CloseAgentRequest(agent_id=agent.id))
    with pytest.raises(grpc.RpcError) as info:
        Stubs.of(grpc_channel).turns.SendPrompt(prompt_request(agent.id, "hi"))
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION
    assert details.reason == "AGENT_CLOSED"


def test_list_providers_names_the_scripted_provider(grpc_stub: Any) -> None:
    providers = grpc_stub.ListProviders(agent_pb.ListProvidersRequest()).providers
    scripted = next(p for p in providers if p.name == "scripted")
    assert scripted.available and scripted.modes and scripted.models


def test_create_with_an_initial_prompt_starts_a_turn(grpc_stub: Any, tmp_path: Any) -> None:
    from tests.support.client import text

    resp = grpc_stub.CreateAgent(create_request(str(tmp_path), initial_prompt=text("hello there")))
    assert resp.turn_id
