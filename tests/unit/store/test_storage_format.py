"""The storage format (store/format/). Agent snapshots survive encode/decode exactly (what the
durable store relies on), except the content of queued prompts too long for their summary (the
store keeps it in a table of its own), and a record that cannot be an agent is refused with a
reason, never half-loaded. The stored timeline item is wire-compatible with the API's: the
writer stores the bytes it streams. (That only store/format/ imports protobuf, and never the
API's messages, is tests/unit/test_layers.py's.)"""

from __future__ import annotations

from dataclasses import MISSING, fields, replace
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import given
from hypothesis import strategies as st

from corral.storage.v1 import records_pb2 as storage_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.domain import agent as da
from corral_server.domain import subagents as ds
from corral_server.domain import timeline as dt
from corral_server.domain.content import ImagePart, PromptSummary, TextPart
from corral_server.domain.workspace import Workspace
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.format.agents import decode_agent, encode_agent
from corral_server.store.format.runs import decode_run, encode_run
from tests.unit.store.old_state import sample

SAMPLE_ITEMS: list[dt.TimelineItem] = [
    dt.UserMessage("hello", "cm-1", "msg-1"),
    dt.AssistantMessage("hi", "msg-2"),
    dt.Reasoning("hmm"),
    dt.ToolCall(
        "c1", "read", dt.ToolCallStatus.FAILED, {"a": [1, 2.5, None, {"b": True}]}, "x", "e"
    ),
    dt.ToolCall("c2", "list", dt.ToolCallStatus.RUNNING),
    dt.Todo((dt.TodoEntry("one"), dt.TodoEntry("two", True))),
    dt.ErrorItem("bad", "E"),
    dt.Compaction("so far"),
    dt.SubagentNotice("run-1", "child", "done"),
]

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
# Every field of the domain's Agent, each with values of its own (a field added to Agent and
# not here fails test_the_round_trip_draws_every_field_of_an_agent).
AGENT_FIELDS: dict[str, st.SearchStrategy[Any]] = dict(
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
    title_source=st.sampled_from(da.TitleSource),
    workspace=st.one_of(st.none(), st.builds(Workspace, texts, texts, texts, texts, texts)),
    usage_total=usages,
)
agents = st.builds(da.Agent, **AGENT_FIELDS)


def test_the_round_trip_draws_every_field_of_an_agent() -> None:
    assert set(AGENT_FIELDS) == {f.name for f in fields(da.Agent)}


def test_a_run_with_every_field_set_survives_the_round_trip() -> None:
    full = replace(sample.RUN_FULL, announced_at_ms=1_700_000_004_000)
    defaults = {f.name: f.default for f in fields(ds.SubagentRun) if f.default is not MISSING}
    assert [name for name, value in defaults.items() if getattr(full, name) == value] == []
    assert decode_run(encode_run(full)) == full


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


# --- timeline items: the stored message is the streamed one --------------------------------


def _shape(descriptor: Descriptor, seen: set[str] | None = None) -> dict[str, object]:
    """What decides a message's wire encoding: every field's number, name, type and
    cardinality, nested messages and enums (by their numbers) included; package names left
    out. Well-known types (google.protobuf.*) are the same messages on both sides."""
    seen = set() if seen is None else seen
    seen.add(descriptor.full_name)
    fields: dict[str, object] = {}
    for f in descriptor.fields:
        shape: object = None
        if f.message_type is not None:
            nested = f.message_type
            if nested.full_name.startswith("google.protobuf."):
                shape = nested.full_name
            elif nested.full_name not in seen:
                shape = _shape(nested, seen)
        elif f.enum_type is not None:
            shape = {v.number: v.name for v in f.enum_type.values}
        oneof = f.containing_oneof.name if f.containing_oneof else None
        fields[f"{f.number}"] = (f.name, f.type, f.is_repeated, oneof, shape)
    return fields


def test_the_stored_item_is_wire_compatible_with_the_streamed_one() -> None:
    """If this fails, an API change reached the timeline item: either make the same change to
    corral.storage.v1.TimelineItem (a change of the disk format, in its own right), or give
    the stored item its own encoding in store/format/ and let the writer encode both."""
    assert _shape(storage_pb.TimelineItem.DESCRIPTOR) == _shape(timeline_pb.TimelineItem.DESCRIPTOR)


@pytest.mark.parametrize("item", SAMPLE_ITEMS)
def test_a_streamed_item_reads_as_the_stored_message_with_nothing_unknown(
    item: dt.TimelineItem,
) -> None:
    data = ITEM_CODEC.encode(item)
    stored = storage_pb.TimelineItem.FromString(data)
    assert stored.SerializeToString(deterministic=True) == timeline_pb.TimelineItem.FromString(
        data
    ).SerializeToString(deterministic=True)
    assert not _unknown(stored)
    assert ITEM_CODEC.decode(stored.SerializeToString()) == item


def _unknown(message: Message) -> bool:
    if len(UnknownFieldSet(message)):
        return True
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = value if field.is_repeated else [value]
        if any(isinstance(v, Message) and _unknown(v) for v in values):
            return True
    return False
