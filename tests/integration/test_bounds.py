"""Requests bounded before any work, through the wire: counts and sizes are checked on the
protobuf message, so a request over a limit is refused at once, naming the limit."""

from __future__ import annotations

import resource
import time
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.manager.validate import MAX_PROMPT_BYTES, Limits
from tests.support.client import Stubs, create_request, error_details, text

EMPTY_PARTS = 4_000_000
EMOJI = "\U0001f600"  # 4 bytes of UTF-8, 1 character


def raw_call(channel: Any, method: str, body: bytes) -> grpc.RpcError:
    """Send `body` as is (building 4 M protobuf parts in the client would cost seconds)."""
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as caught:
        call(body, timeout=60)
    return caught.value


def with_empty_parts(head: bytes, field_number: int, count: int) -> bytes:
    """`head` followed by `count` empty ContentParts in repeated field `field_number`."""
    return head + bytes([field_number << 3 | 2, 0]) * count


def _timed(fn: Any) -> tuple[Any, float, int]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    return result, elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before


def test_create_agent_with_four_million_empty_prompt_parts_is_refused_naming_the_limit(
    grpc_channel: Any, tmp_path: Any
) -> None:
    head = create_request(str(tmp_path)).SerializeToString()
    body = with_empty_parts(head, 7, EMPTY_PARTS)  # CreateAgentRequest.initial_prompt = 7
    error, elapsed_s, grown_kb = _timed(
        lambda: raw_call(grpc_channel, "/corral.v1.AgentService/CreateAgent", body)
    )
    details = error_details(error)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == ("initial_prompt",)
    assert "max_content_parts" in details.message
    print(f"CreateAgent, {EMPTY_PARTS:,} parts: {elapsed_s:.2f} s, max RSS +{grown_kb} KiB")


def test_send_prompt_with_four_million_empty_parts_is_refused_naming_the_limit(
    grpc_channel: Any, tmp_path: Any
) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent.id
    head = turn_pb.SendPromptRequest(agent_id=agent_id).SerializeToString()
    body = with_empty_parts(head, 2, EMPTY_PARTS)  # SendPromptRequest.content = 2
    error, elapsed_s, grown_kb = _timed(
        lambda: raw_call(grpc_channel, "/corral.v1.TurnService/SendPrompt", body)
    )
    details = error_details(error)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == ("content",)
    assert "max_content_parts" in details.message
    print(f"SendPrompt, {EMPTY_PARTS:,} parts: {elapsed_s:.2f} s, max RSS +{grown_kb} KiB")


def test_create_agent_with_a_huge_label_map_is_refused_naming_the_limit(
    grpc_channel: Any, tmp_path: Any
) -> None:
    labels = {f"k{i}": "v" for i in range(200_000)}
    with pytest.raises(grpc.RpcError) as caught:
        Stubs.of(grpc_channel).agents.CreateAgent(create_request(str(tmp_path), labels=labels))
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == ("labels",)
    assert f"200000 labels; the limit is {Limits().max_labels} (max_labels)" in details.message


def test_update_agent_with_a_huge_label_map_or_mask_is_refused(
    grpc_channel: Any, tmp_path: Any
) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent.id
    request = agent_pb.UpdateAgentRequest(
        agent_id=agent_id, labels={f"k{i}": "v" for i in range(100_000)}
    )
    with pytest.raises(grpc.RpcError) as caught:
        stubs.agents.UpdateAgent(request)
    assert "max_labels" in error_details(caught.value).message
    request = agent_pb.UpdateAgentRequest(agent_id=agent_id, title="t")
    request.update_mask.paths.extend(["title"] * 1_000_000)
    with pytest.raises(grpc.RpcError) as caught:
        stubs.agents.UpdateAgent(request)
    assert error_details(caught.value).fields == ("update_mask",)


def test_clear_attention_naming_more_ids_than_the_limit_changes_nothing(
    grpc_channel: Any, tmp_path: Any
) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent.id
    ids = [agent_id] * (Limits().max_ids + 1)
    with pytest.raises(grpc.RpcError) as caught:
        stubs.agents.ClearAttention(agent_pb.ClearAttentionRequest(agent_ids=ids))
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == ("agent_ids",)
    assert "max_ids" in details.message


@pytest.mark.parametrize("where", ["initial_prompt", "content"])
def test_a_prompt_within_the_character_limit_but_over_the_byte_limit_is_refused(
    grpc_channel: Any, tmp_path: Any, where: str
) -> None:
    prompt = "/reply " + EMOJI * (MAX_PROMPT_BYTES // 4)  # 524 k characters, 2 MB of UTF-8
    assert len(prompt) < Limits().max_prompt_chars
    stubs = Stubs.of(grpc_channel)
    with pytest.raises(grpc.RpcError) as caught:
        if where == "initial_prompt":
            stubs.agents.CreateAgent(create_request(str(tmp_path), initial_prompt=text(prompt)))
        else:
            agent_id = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent.id
            stubs.turns.SendPrompt(
                turn_pb.SendPromptRequest(agent_id=agent_id, content=text(prompt))
            )
    details = error_details(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == (where,)
    assert "max_prompt_bytes" in details.message
