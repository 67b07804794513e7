"""prepare / commit: the timeline writer encodes an event before it stores anything, and numbering
it afterwards produces exactly the bytes that encoding it with its revision would have.

Uses the real encoder (rpc/convert.py, with the hand-written row path of rpc/wire.py), since
the byte identity is a property of protobuf's field order that a stand-in could not show.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain import agent as da
from corral_server.domain import events as de
from corral_server.domain import timeline as dt
from corral_server.domain.agent import AgentId
from corral_server.domain.schedules import ScheduleOutcome, ScheduleRun
from corral_server.domain.subagents import RunId, SubagentRun
from corral_server.hub import EventHub, Prepared, frame
from corral_server.hub.ring import frame_with_revision, revision_field
from corral_server.rpc import wire
from corral_server.rpc.convert import encode_event
from corral_server.timeline.store import NewRow
from tests.support.fakes import idle_agent
from tests.support.hub import poll

BUSY = da.Agent(
    id=AgentId("a" * 32),
    provider="scripted",
    cwd="/work/project",
    lifecycle=da.Running(active_turn_id="t1"),
    created_at_ms=1_700_000_000_123,
    updated_at_ms=1_700_000_000_456,
    epoch="e7",
    next_seq=42,
    model="m",
    mode="plan",
    title="busy agent",
    labels={"team": "core"},
    attention=da.Attention(True, da.AttentionReason.FINISHED, 1_700_000_000_789),
    provider_session_id="sess",
    archived_at_ms=1_700_000_001_000,
    last_error=da.AgentError("boom", "PROVIDER_ERROR"),
    last_usage=da.Usage(10, 20, 5, 0.25),
)

ROW = dt.TimelineRow(7, 1_700_000_000_001, dt.AssistantMessage("hi ☃", "m1"), "t1", "pm1")
TOOL_ROW = dt.TimelineRow(
    8,
    1_700_000_000_002,
    dt.ToolCall("c1", "read", dt.ToolCallStatus.COMPLETED, {"path": "x"}),
    "t1",
)

EVERY_KIND: list[de.Event] = [
    de.AgentUpserted(idle_agent("a1")),
    de.AgentUpserted(BUSY),
    de.AgentRemoved("a1"),
    de.RowAppended("a1", "e1", ROW),  # the hand-written path (rpc/wire.py)
    de.RowAppended("a1", "e1", TOOL_ROW),  # protobuf embedded in the hand-written path
    de.RowAppended("a1", "", dt.TimelineRow(0, 0, dt.Reasoning(""))),  # every default
    de.TimelineReset("a1", "e2", "compacted"),
    de.RowUpdated("a1", "e2", 9, "pm-9"),
    de.TurnStarted("a1", "t1"),
    de.TurnCompleted("a1", "t1"),
    de.TurnCompleted("a1", "t1", da.Usage(1, 2, 3, 0.5)),
    de.TurnFailed("a1", "t1", da.AgentError("bad", "X")),
    de.TurnCanceled("a1", "t1", "user"),
    de.PermissionRequested(
        "a1", "t1", da.PendingPermission("p1", "write", actions=(da.PermissionAction("a", "A"),))
    ),
    de.PermissionResolved("a1", "t1", "p1", da.PermissionBehavior.ALLOW),
    de.PermissionResolved("a1", "t1", "p1", None),
    de.SubagentRunUpdated(SubagentRun(RunId("r1"), "c1", "a1", "a1", "task", 1_000, 1)),
    de.AttentionRequired("a1", da.AttentionReason.FINISHED),
    de.ChangesUpdated("a1", 2, 10, 3),
    de.ScheduleFired("s1", ScheduleRun(1_000, 1_001, ScheduleOutcome.QUEUED, "a1")),
]

REVISIONS = [1, 2, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 2**40]


def test_every_event_kind_is_covered() -> None:
    covered = {type(event) for event in EVERY_KIND}
    assert covered == set(de.Event.__args__)


@pytest.mark.parametrize("event", EVERY_KIND, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("revision", REVISIONS)
def test_a_frame_numbered_after_encoding_equals_the_frame_encoded_with_its_revision(
    event: de.Event, revision: int
) -> None:
    body = encode_event(0, event)
    assert frame_with_revision(revision, body) == frame(encode_event(revision, event))


@given(revision=st.integers(1, 2**63), text=st.text(max_size=5_000))
def test_numbering_a_row_of_any_size_matches_protobuf(revision: int, text: str) -> None:
    # Sizes around the frame header's 4,096-byte table edge and every varint width.
    event = de.RowAppended("a1", "e1", dt.TimelineRow(3, 9, dt.AssistantMessage(text * 2)))
    body = encode_event(0, event)
    assert frame_with_revision(revision, body) == frame(encode_event(revision, event))


def test_commit_frames_the_prepared_event_with_the_next_revision() -> None:
    hub = EventHub(encode_event)
    sub = hub.subscribe(frozenset(), None, lambda scope: ())
    poll(sub)  # the snapshot: just Synced(0)
    expected = b""
    for revision, event in enumerate(EVERY_KIND, start=1):
        prepared = hub.prepare(event)
        assert prepared == Prepared(event.agent_id, encode_event(0, event))
        assert hub.commit(prepared) == revision
        expected += frame(encode_event(revision, event))
    assert poll(sub) == expected


def test_publish_is_prepare_then_commit() -> None:
    hub = EventHub(encode_event)
    sub = hub.subscribe(frozenset(), None, lambda scope: ())
    poll(sub)
    assert hub.publish(EVERY_KIND[3]) == 1
    assert poll(sub) == frame(encode_event(1, EVERY_KIND[3]))


def test_an_event_the_encoder_refuses_fails_in_prepare_and_takes_no_revision() -> None:
    hub = EventHub(encode_event)
    surrogate = de.RowAppended("a1", "e1", dt.TimelineRow(1, 0, dt.AssistantMessage("\ud800")))
    with pytest.raises(UnicodeEncodeError):
        hub.prepare(surrogate)
    assert hub.head_revision == 0
    assert hub.publish(de.TurnStarted("a1", "t1")) == 1


def test_the_revision_field_tables_agree_with_the_general_varint_at_every_width() -> None:
    sweep = [*range(1, 2_200_000, 997), *(2**k + d for k in range(7, 64, 7) for d in (-1, 0, 1))]
    for revision in sweep:
        assert revision_field(revision) == b"\x08" + wire.varint(revision), revision


ROWS = [
    NewRow(dt.AssistantMessage("chunk", "m1"), 1_700_000_000_123, "t1", "m1"),
    NewRow(dt.Reasoning("why"), 1_700_000_000_124, "t1"),
    NewRow(dt.UserMessage("hi", "cm-1"), 1_700_000_000_125),
]


def test_prepared_rows_are_the_rows_events_prepared_one_by_one_and_share_their_items() -> None:
    batched = EventHub(encode_event, encode_rows=wire.row_appended_batch)
    prepared, items = batched.prepare_rows("a1", "e1", 7, ROWS)
    one_by_one, none = EventHub(encode_event).prepare_rows("a1", "e1", 7, ROWS)
    expected = [
        batched.prepare(de.RowAppended("a1", "e1", dt.TimelineRow(7 + i, r[1], r[0], r[2], r[3])))
        for i, r in enumerate(ROWS)
    ]
    assert [tuple(p) for p in prepared] == [tuple(p) for p in one_by_one] == expected
    assert none is None
    assert items == [wire.item_bytes(row.item) for row in ROWS]
    batched.commit_many(prepared)
    assert batched.head_revision == 3
