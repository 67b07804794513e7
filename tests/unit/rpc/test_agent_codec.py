"""Agent snapshots survive encode/decode exactly (what the durable store relies on), except the
content of queued prompts too long for their summary (the store keeps it in a table of its
own), and a record that cannot be an agent is refused with a reason, never half-loaded."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain import agent as da
from corral_server.domain.content import ImagePart, PromptSummary, TextPart
from corral_server.domain.workspace import Workspace
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
    workspace=st.one_of(st.none(), st.builds(Workspace, texts, texts, texts, texts, texts)),
)


@given(agents)
def test_an_agent_survives_encode_and_decode(agent: da.Agent) -> None:
    summarised = tuple(
        replace(q, content=()) if q.summary.clipped else q for q in agent.queued_prompts
    )
    assert decode_agent(encode_agent(agent)) == replace(agent, queued_prompts=summarised)


def test_a_record_keeps_a_long_queued_prompt_as_its_summary_only() -> None:
    prompt = (TextPart("x" * 100_000), ImagePart("image/png", b"\x89PNG"))
    agent = da.Agent(
        da.AgentId("a1"),
        "scripted",
        "/",
        da.Idle(),
        1,
        2,
        "e1",
        1,
        queued_prompts=(da.QueuedPrompt("cm-1", prompt, 3, da.QueuedBy.FOLLOW_UP),),
    )
    record = encode_agent(agent)
    assert len(record) < 1_000
    [queued] = decode_agent(record).queued_prompts
    assert queued.content == ()
    assert queued.queued_by is da.QueuedBy.FOLLOW_UP
    assert queued.summary == PromptSummary(100_000, 100_004, 1, "x" * 256, True)


def test_a_record_from_before_summaries_keeps_its_queued_prompts_whole() -> None:
    from corral.v1 import agent_pb2 as agent_pb
    from corral.v1 import content_pb2 as content_pb

    old = agent_pb.Agent(id="a1")
    old.lifecycle.idle.SetInParent()
    old.queued_prompts.add(
        client_message_id="cm-1", content=[content_pb.ContentPart(text="y" * 5_000)]
    )
    [queued] = decode_agent(old.SerializeToString()).queued_prompts
    assert queued.content == (TextPart("y" * 5_000),)
    assert queued.summary.text_bytes == 5_000 and queued.summary.clipped


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
