"""The hand-written row encoder must produce exactly protobuf's bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain import events as de
from corral_server.domain import timeline as dt
from corral_server.rpc import convert, wire
from corral_server.timeline.store import NewRow
from corral_server.varint import encode_varint

texts = st.text(max_size=300)
items = st.one_of(
    st.builds(dt.AssistantMessage, texts, texts),
    st.builds(dt.Reasoning, texts),
    st.builds(dt.UserMessage, texts, texts, texts),
    st.builds(dt.ErrorItem, texts, texts),
    st.builds(
        dt.ToolCall,
        texts,
        texts,
        st.sampled_from(list(dt.ToolCallStatus)),
        # One key at most: protobuf itself does not fix the order of map (Struct) entries.
        st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=1),
    ),
)
rows = st.builds(
    dt.TimelineRow,
    seq=st.integers(0, 2**40),
    timestamp_ms=st.integers(0, 2**42),
    item=items,
    turn_id=texts,
    provider_message_id=texts,
)


@given(revision=st.integers(0, 2**50), agent_id=texts, epoch=texts, row=rows)
def test_row_appended_bytes_equal_protobuf_serialization(
    revision: int, agent_id: str, epoch: str, row: dt.TimelineRow
) -> None:
    event = de.RowAppended(agent_id, epoch, row)
    expected = convert.event_to_pb(revision, event).SerializeToString()
    assert wire.row_appended_event(revision, agent_id, epoch, row) == expected
    assert convert.encode_event(revision, event) == expected


def test_varint_matches_the_protobuf_encoding_at_the_byte_boundaries() -> None:
    assert wire.varint(0) == b"\x00"
    assert wire.varint(127) == b"\x7f"
    assert wire.varint(128) == b"\x80\x01"
    assert wire.varint(300) == b"\xac\x02"
    assert wire.varint(2**63) == bytes([0x80] * 9 + [0x01])


def test_varint_fast_paths_agree_with_the_general_loop() -> None:
    for value in [*range(0, 70_000, 7), 2_097_151, 2_097_152, 268_435_455, 268_435_456, 2**35]:
        assert wire.varint(value) == encode_varint(value), value


def test_a_tool_input_too_deep_for_protobuf_still_encodes_as_json_text() -> None:
    deep: dt.JsonValue = "leaf"
    for _ in range(60):
        deep = {"k": deep}
    row = dt.TimelineRow(1, 0, dt.ToolCall("c1", "read", dt.ToolCallStatus.COMPLETED, deep))
    event = de.RowAppended("a", "e", row)
    decoded = convert.event_to_pb(1, event)
    assert decoded.timeline_row_appended.row.item.tool_call.input.string_value.startswith('{"k": ')
    assert convert.encode_event(1, event) == decoded.SerializeToString()


new_rows = st.lists(
    st.builds(
        NewRow,
        item=items,
        timestamp_ms=st.integers(0, 2**42),
        turn_id=st.sampled_from(["", "turn-1", "turn-2"]) | texts,
        provider_message_id=texts,
    ),
    max_size=8,
)


@given(agent_id=texts, epoch=texts, first_seq=st.integers(1, 2**40), rows=new_rows)
def test_a_batch_of_rows_encodes_each_event_and_each_item_as_one_at_a_time(
    agent_id: str, epoch: str, first_seq: int, rows: list[NewRow]
) -> None:
    bodies, encoded = wire.row_appended_batch(agent_id, epoch, first_seq, rows)
    assert bodies == [
        wire.row_appended_event(
            0, agent_id, epoch, dt.TimelineRow(first_seq + i, r[1], r[0], r[2], r[3])
        )
        for i, r in enumerate(rows)
    ]
    assert encoded == [wire.item_bytes(row.item) for row in rows]
    assert all(item in body for item, body in zip(encoded, bodies, strict=True))
