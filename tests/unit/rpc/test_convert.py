"""Domain <-> protobuf conversion (rpc/convert.py): round trips, oneofs and presence.

Round trips go through the wire (serialize, parse) so they also prove the messages are valid.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.domain import agent as da
from corral_server.domain import events as de
from corral_server.domain import timeline as dt
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.domain.subagents import RunId, SubagentRun
from corral_server.rpc import convert

MS = 1_700_000_000_123  # a timestamp with a millisecond part


def wire(msg: Any) -> Any:
    """The message as a receiver parses it."""
    return type(msg).FromString(msg.SerializeToString())


def item_round_trip(item: dt.TimelineItem) -> dt.TimelineItem:
    return convert.item_from_pb(wire(convert.item_to_pb(item)))


# --- strategies ---------------------------------------------------------------------------

# Protobuf strings are UTF-8: no lone surrogates.
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
# google.protobuf.Value holds numbers as doubles: integers are exact up to 2**53.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
items: st.SearchStrategy[dt.TimelineItem] = st.one_of(
    st.builds(dt.UserMessage, texts, texts, texts),
    st.builds(dt.AssistantMessage, texts, texts),
    st.builds(dt.Reasoning, texts),
    st.builds(
        dt.ToolCall,
        texts,
        texts,
        st.sampled_from(dt.ToolCallStatus),
        json_values,
        json_values,
        texts,
    ),
    st.builds(dt.Todo, st.lists(st.builds(dt.TodoEntry, texts, st.booleans())).map(tuple)),
    st.builds(dt.ErrorItem, texts, texts),
    st.builds(dt.Compaction, texts),
    st.builds(dt.SubagentNotice, texts, texts, texts),
)


# --- timeline items and rows --------------------------------------------------------------


@given(items)
def test_every_timeline_item_survives_a_round_trip(item: dt.TimelineItem) -> None:
    assert item_round_trip(item) == item


def test_every_item_kind_fills_its_own_oneof() -> None:
    expected: dict[dt.TimelineItem, str] = {
        dt.UserMessage("hi", "c1", "m1"): "user_message",
        dt.AssistantMessage("hello", "m2"): "assistant_message",
        dt.Reasoning("hmm"): "reasoning",
        dt.ToolCall("c1", "bash", dt.ToolCallStatus.RUNNING): "tool_call",
        dt.Todo((dt.TodoEntry("a", True),)): "todo",
        dt.ErrorItem("boom", "E"): "error",
        dt.Compaction("summary"): "compaction",
        dt.SubagentNotice("r1", "a2", "done"): "subagent_notice",
    }
    assert {type(i) for i in expected} == set(typing.get_args(dt.TimelineItem))
    for item, kind in expected.items():
        assert convert.item_to_pb(item).WhichOneof("kind") == kind
        assert item_round_trip(item) == item


@pytest.mark.parametrize(
    "value",
    [
        {"cmd": "ls -la", "timeout": 30, "env": {"A": "1"}, "flags": ["-v", True, None]},
        ["a", 1.5, False],
        "plain text",
        42,
        -0.25,
        True,
        {},
        [],
    ],
)
def test_tool_input_and_output_keep_any_json_value(value: dt.JsonValue) -> None:
    call = dt.ToolCall("c1", "bash", dt.ToolCallStatus.COMPLETED, input=value, output=value)
    msg = convert.item_to_pb(call).tool_call
    assert msg.HasField("input") and msg.HasField("output")
    assert item_round_trip(call) == call


def test_a_tool_call_without_input_or_output_leaves_both_unset() -> None:
    call = dt.ToolCall("c1", "bash", dt.ToolCallStatus.PENDING, error="")
    msg = convert.item_to_pb(call).tool_call
    assert not msg.HasField("input")
    assert not msg.HasField("output")
    assert item_round_trip(call) == call


def test_every_tool_status_maps_to_a_distinct_wire_value() -> None:
    wire_values = set()
    for status in dt.ToolCallStatus:
        msg = convert.item_to_pb(dt.ToolCall("c", "n", status)).tool_call
        assert msg.status != timeline_pb.TOOL_CALL_STATUS_UNSPECIFIED
        wire_values.add(msg.status)
        back = item_round_trip(dt.ToolCall("c", "n", status))
        assert isinstance(back, dt.ToolCall) and back.status is status
    assert len(wire_values) == len(dt.ToolCallStatus)


def test_an_item_with_no_kind_is_rejected() -> None:
    with pytest.raises(ValueError):
        convert.item_from_pb(timeline_pb.TimelineItem())


@given(items, st.integers(1, 2**40), st.integers(0, 2**45), texts, texts)
def test_a_row_survives_a_round_trip(
    item: dt.TimelineItem, seq: int, timestamp_ms: int, turn_id: str, message_id: str
) -> None:
    row = dt.TimelineRow(seq, timestamp_ms, item, turn_id, message_id)
    assert convert.row_from_pb(wire(convert.row_to_pb(row))) == row


def test_a_row_carries_its_timestamp_to_the_millisecond() -> None:
    row = dt.TimelineRow(7, MS, dt.Reasoning("x"), "t1", "pm-1")
    msg = convert.row_to_pb(row)
    assert (msg.seq, msg.turn_id, msg.provider_message_id) == (7, "t1", "pm-1")
    assert (msg.timestamp.seconds, msg.timestamp.nanos) == (1_700_000_000, 123_000_000)
    assert convert.row_from_pb(msg).timestamp_ms == MS


@given(st.integers(-(2**40), 2**45))
def test_timestamps_keep_millisecond_precision(ms: int) -> None:
    ts = convert.timestamp(ms)
    assert 0 <= ts.nanos < 1_000_000_000
    assert ts.nanos % 1_000_000 == 0
    assert convert.timestamp_ms(wire(ts)) == ms


def test_a_cursor_survives_a_round_trip() -> None:
    cursor = dt.Cursor("epoch-1", 42)
    msg = convert.cursor_to_pb(cursor)
    assert (msg.epoch, msg.seq) == ("epoch-1", 42)
    assert convert.cursor_from_pb(wire(msg)) == cursor


# --- prompts ------------------------------------------------------------------------------


def test_a_prompt_of_text_and_images_survives_a_round_trip() -> None:
    prompt: Prompt = (TextPart("look"), ImagePart("image/png", b"\x89PNG\x00"), TextPart(""))
    parts = [wire(p) for p in convert.prompt_to_pb(prompt)]
    assert [p.WhichOneof("part") for p in parts] == ["text", "image", "text"]
    assert convert.prompt_from_pb(parts) == prompt


def test_parts_with_neither_text_nor_image_are_dropped() -> None:
    parts = [content_pb.ContentPart(), content_pb.ContentPart(text="hi")]
    assert convert.prompt_from_pb(parts) == (TextPart("hi"),)


# --- agents -------------------------------------------------------------------------------


def agent(**changes: Any) -> da.Agent:
    base: dict[str, Any] = dict(
        id=da.AgentId("a1"),
        provider="scripted",
        cwd="/work",
        lifecycle=da.Idle(),
        created_at_ms=MS,
        updated_at_ms=MS + 1,
        epoch="epoch-1",
        next_seq=5,
    )
    base.update(changes)
    return da.Agent(**base)


@pytest.mark.parametrize(
    ("lifecycle", "state"),
    [
        (da.Initializing(), "initializing"),
        (da.Idle(), "idle"),
        (da.Running("turn-1"), "running"),
        (da.Running(""), "running"),
        (da.Errored(da.AgentError("boom", "E1")), "errored"),
        (da.Closed(MS), "closed"),
    ],
)
def test_each_lifecycle_fills_its_own_oneof(lifecycle: da.Lifecycle, state: str) -> None:
    assert wire(convert.lifecycle_to_pb(lifecycle)).WhichOneof("state") == state


def test_lifecycle_states_carry_their_fields() -> None:
    running = convert.lifecycle_to_pb(da.Running("turn-9")).running
    assert running.active_turn_id == "turn-9"
    errored = convert.lifecycle_to_pb(da.Errored(da.AgentError("boom", "E1"))).errored
    assert (errored.error.message, errored.error.code) == ("boom", "E1")
    closed = convert.lifecycle_to_pb(da.Closed(MS)).closed
    assert convert.timestamp_ms(closed.closed_at) == MS


def test_an_agent_carries_every_field_to_the_wire() -> None:
    full = agent(
        model="m",
        mode="plan",
        title="T",
        labels={"team": "core", da.PARENT_AGENT_ID_LABEL: "parent-1"},
        lifecycle=da.Running("turn-1"),
        attention=da.Attention(True, da.AttentionReason.PERMISSION, MS + 2),
        pending_permissions=(
            da.PendingPermission(
                "p1", "bash", "exec", "Run ls?", {"cmd": "ls"}, (da.PermissionAction("y", "Yes"),)
            ),
        ),
        queued_prompts=(da.QueuedPrompt("cm-1", (TextPart("next"),), MS + 3),),
        provider_session_id="s-1",
    )
    msg = wire(convert.agent_to_pb(full))
    assert (msg.id, msg.provider, msg.cwd, msg.model, msg.mode, msg.title) == (
        "a1",
        "scripted",
        "/work",
        "m",
        "plan",
        "T",
    )
    assert dict(msg.labels) == {"team": "core", da.PARENT_AGENT_ID_LABEL: "parent-1"}
    assert msg.parent_agent_id == "parent-1"
    assert msg.lifecycle.running.active_turn_id == "turn-1"
    assert msg.attention.required
    assert msg.attention.reason == agent_pb.ATTENTION_REASON_PERMISSION
    assert convert.timestamp_ms(msg.attention.at) == MS + 2
    [permission] = msg.pending_permissions
    assert (permission.id, permission.name, permission.kind, permission.title) == (
        "p1",
        "bash",
        "exec",
        "Run ls?",
    )
    assert dict(permission.input) == {"cmd": "ls"}
    assert [(a.id, a.label) for a in permission.actions] == [("y", "Yes")]
    [queued] = msg.queued_prompts
    assert queued.client_message_id == "cm-1"
    assert convert.prompt_from_pb(list(queued.content)) == (TextPart("next"),)
    assert convert.timestamp_ms(queued.queued_at) == MS + 3
    assert msg.provider_session_id == "s-1"
    assert convert.timestamp_ms(msg.created_at) == MS
    assert convert.timestamp_ms(msg.updated_at) == MS + 1
    assert (msg.timeline.epoch, msg.timeline.next_seq) == ("epoch-1", 5)


def test_an_agent_without_a_parent_label_has_no_parent() -> None:
    assert convert.agent_to_pb(agent(labels={"team": "core"})).parent_agent_id == ""


def test_optional_agent_fields_are_unset_unless_present() -> None:
    bare = wire(convert.agent_to_pb(agent()))
    assert not bare.HasField("archived_at")
    assert not bare.HasField("last_error")
    assert not bare.HasField("last_usage")
    assert not bare.attention.required
    assert not bare.attention.HasField("at")
    assert bare.attention.reason == agent_pb.ATTENTION_REASON_UNSPECIFIED


def test_optional_agent_fields_are_set_when_present() -> None:
    usage = da.Usage(input_tokens=1, output_tokens=2, cached_input_tokens=3, cost_usd=0.5)
    msg = wire(
        convert.agent_to_pb(
            agent(archived_at_ms=MS + 9, last_error=da.AgentError("x", "E"), last_usage=usage)
        )
    )
    assert convert.timestamp_ms(msg.archived_at) == MS + 9
    assert (msg.last_error.message, msg.last_error.code) == ("x", "E")
    assert (
        msg.last_usage.input_tokens,
        msg.last_usage.output_tokens,
        msg.last_usage.cached_input_tokens,
        msg.last_usage.cost_usd,
    ) == (1, 2, 3, 0.5)


def test_an_agent_archived_at_the_epoch_start_is_still_archived() -> None:
    assert wire(convert.agent_to_pb(agent(archived_at_ms=0))).HasField("archived_at")


# --- events -------------------------------------------------------------------------------

ROW = dt.TimelineRow(3, MS, dt.AssistantMessage("hi"), "t1")
USAGE = da.Usage(input_tokens=10)
PERMISSION = da.PendingPermission(
    "p1", "write", "tool", "Allow write?", {"path": "a"}, (da.PermissionAction("ok", "OK"),), "t1"
)
EVENTS: list[tuple[de.Event | de.StreamControl, str, dict[str, Any]]] = [
    (de.AgentUpserted(agent()), "agent_upserted", {}),
    (de.AgentRemoved("a1"), "agent_removed", {"agent_id": "a1"}),
    (de.RowAppended("a1", "e1", ROW), "timeline_row_appended", {"agent_id": "a1", "epoch": "e1"}),
    (de.TimelineReset("a1", "e2", "rewind"), "timeline_reset", {"epoch": "e2", "reason": "rewind"}),
    (
        de.RowUpdated("a1", "e1", 4, "pm-4"),
        "timeline_row_updated",
        {"seq": 4, "provider_message_id": "pm-4"},
    ),
    (de.TurnStarted("a1", "t1"), "turn_started", {"agent_id": "a1", "turn_id": "t1"}),
    (de.TurnCompleted("a1", "t1", USAGE), "turn_completed", {"turn_id": "t1"}),
    (de.TurnFailed("a1", "t1", da.AgentError("boom")), "turn_failed", {"turn_id": "t1"}),
    (de.TurnCanceled("a1", "t1", "user"), "turn_canceled", {"reason": "user"}),
    (
        de.PermissionRequested("a1", "t1", PERMISSION),
        "permission_requested",
        {"agent_id": "a1", "turn_id": "t1"},
    ),
    (
        de.PermissionResolved("a1", "t1", "p1", da.PermissionBehavior.DENY),
        "permission_resolved",
        {"request_id": "p1", "behavior": turn_pb.PERMISSION_BEHAVIOR_DENY, "canceled": False},
    ),
    (
        de.PermissionResolved("a1", "t1", "p1", None),
        "permission_resolved",
        {"behavior": turn_pb.PERMISSION_BEHAVIOR_UNSPECIFIED, "canceled": True},
    ),
    (
        de.AttentionRequired("a1", da.AttentionReason.ERROR),
        "attention_required",
        {"agent_id": "a1", "reason": agent_pb.ATTENTION_REASON_ERROR},
    ),
    (de.Synced(41, reset=True), "synced", {"revision": 41, "reset": True}),
    (
        de.SubscriptionReset(3, 10, "compacted"),
        "subscription_reset",
        {"requested_revision": 3, "earliest_revision": 10, "reason": "compacted"},
    ),
    (de.StreamEnding(99, "drain"), "stream_ending", {"resume_revision": 99, "reason": "drain"}),
    (
        de.SubagentRunUpdated(SubagentRun(RunId("r1"), "c1", "a1", "a1", "do it", 1_000, 1)),
        "subagent_run_updated",
        {"run_id": "r1", "child_agent_id": "c1", "requester_agent_id": "a1"},
    ),
]


def test_every_domain_event_and_stream_control_type_is_covered_here() -> None:
    covered = {type(event) for event, _, _ in EVENTS}
    assert covered == set(typing.get_args(de.Event)) | set(typing.get_args(de.StreamControl))


@pytest.mark.parametrize(("event", "payload", "fields"), EVENTS, ids=lambda v: str(v)[:20])
def test_each_event_fills_its_own_payload_oneof(
    event: de.Event | de.StreamControl, payload: str, fields: dict[str, Any]
) -> None:
    msg = event_pb.Event.FromString(convert.encode_event(17, event))
    assert msg.revision == 17
    assert msg.WhichOneof("payload") == payload
    body = getattr(msg, payload)
    for name, value in fields.items():
        assert getattr(body, name) == value, name


def test_event_payloads_carry_their_nested_messages() -> None:
    upserted = convert.event_to_pb(1, de.AgentUpserted(agent()))
    assert upserted.agent_upserted.agent == convert.agent_to_pb(agent())
    appended = convert.event_to_pb(2, de.RowAppended("a1", "e1", ROW))
    assert convert.row_from_pb(appended.timeline_row_appended.row) == ROW
    completed = convert.event_to_pb(3, de.TurnCompleted("a1", "t1", USAGE))
    assert completed.turn_completed.usage.input_tokens == 10
    failed = convert.event_to_pb(4, de.TurnFailed("a1", "t1", da.AgentError("boom", "E")))
    assert (failed.turn_failed.error.message, failed.turn_failed.error.code) == ("boom", "E")


def test_a_completed_turn_without_usage_leaves_usage_unset() -> None:
    msg = convert.event_to_pb(1, de.TurnCompleted("a1", "t1"))
    assert not msg.turn_completed.HasField("usage")
