"""Agent snapshots survive encode/decode exactly (what the durable store relies on), and a
record that cannot be an agent is refused with a reason, never half-loaded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain import agent as da
from corral_server.domain.content import ImagePart, TextPart
from corral_server.rpc.agent_codec import decode_agent, encode_agent

texts = st.text(max_size=12)
millis = st.integers(0, 2**41)
errors = st.builds(da.AgentError, texts, texts)
lifecycles = st.one_of(
    st.just(da.Initializing()),
    st.just(da.Idle()),
    st.builds(da.Running, texts),
    st.builds(da.Errored, errors),
    st.builds(da.Closed, millis),
)
json_scalars = st.one_of(st.none(), st.booleans(), texts, st.integers(-1000, 1000).map(float))
permissions = st.builds(
    da.PendingPermission,
    texts,
    texts,
    texts,
    texts,
    st.dictionaries(texts, json_scalars, max_size=3),
    st.lists(st.builds(da.PermissionAction, texts, texts, texts), max_size=2).map(tuple),
)
parts = st.one_of(st.builds(TextPart, texts), st.builds(ImagePart, texts, st.binary(max_size=8)))
queued = st.builds(da.QueuedPrompt, texts, st.lists(parts, max_size=3).map(tuple), millis)
attention = st.one_of(
    st.just(da.Attention()),
    st.builds(da.Attention, st.just(True), st.sampled_from(list(da.AttentionReason)), millis),
)
usages = st.builds(
    da.Usage,
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 10**6).map(lambda cents: cents / 100),
)
agents = st.builds(
    da.Agent,
    id=st.text(min_size=1, max_size=12).map(da.AgentId),
    provider=texts,
    cwd=texts,
    lifecycle=lifecycles,
    created_at_ms=millis,
    updated_at_ms=millis,
    epoch=texts,
    next_seq=st.integers(1, 2**40),
    model=texts,
    mode=texts,
    title=texts,
    labels=st.dictionaries(texts, texts, max_size=3),
    attention=attention,
    pending_permissions=st.lists(permissions, max_size=2).map(tuple),
    queued_prompts=st.lists(queued, max_size=2).map(tuple),
    provider_session_id=texts,
    archived_at_ms=st.one_of(st.none(), millis),
    last_error=st.one_of(st.none(), errors),
    last_usage=st.one_of(st.none(), usages),
)


@given(agents)
def test_an_agent_survives_encode_and_decode(agent: da.Agent) -> None:
    assert decode_agent(encode_agent(agent)) == agent


def test_bytes_that_are_not_an_agent_are_refused() -> None:
    with pytest.raises(ValueError, match="not an encoded agent"):
        decode_agent(b"\xff\xff\xff")


def test_an_agent_without_a_lifecycle_or_id_is_refused() -> None:
    from corral.v1 import agent_pb2 as agent_pb

    with pytest.raises(ValueError, match="without a lifecycle"):
        decode_agent(agent_pb.Agent(id="a1").SerializeToString())
    with pytest.raises(ValueError, match="without an id"):
        decode_agent(agent_pb.Agent().SerializeToString())
    errored = agent_pb.Agent(id="a1")
    errored.lifecycle.errored.SetInParent()
    with pytest.raises(ValueError, match="errored lifecycle without its error"):
        decode_agent(errored.SerializeToString())
