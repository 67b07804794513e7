"""Hand-written protobuf wire encoding for the hottest message: `Event` carrying
`timeline_row_appended`. Every streamed row is encoded once for all subscribers, so this is
the writer's largest per-row cost; building four message objects to serialize them cost about
3x more than writing the bytes directly.

The output is byte-for-byte what `SerializeToString` produces (proto3: default-valued fields
are omitted, fields in number order); tests/unit/rpc/test_wire.py pins that with hypothesis.
Items other than assistant and reasoning text are serialized by protobuf and embedded.
"""

from __future__ import annotations

from corral_server.domain.timeline import AssistantMessage, Reasoning, TimelineItem, TimelineRow
from corral_server.rpc import convert


def varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + varint(len(payload)) + payload


def _str_field(tag: int, text: str) -> bytes:
    return _len_field(tag, text.encode()) if text else b""


def item_bytes(item: TimelineItem) -> bytes:
    """A serialized corral.v1.TimelineItem."""
    if type(item) is AssistantMessage:
        # TimelineItem.assistant_message = 2 -> AssistantMessage{text = 1, message_id = 2}
        return _len_field(0x12, _str_field(0x0A, item.text) + _str_field(0x12, item.message_id))
    if type(item) is Reasoning:
        # TimelineItem.reasoning = 3 -> Reasoning{text = 1}
        return _len_field(0x1A, _str_field(0x0A, item.text))
    return convert.item_to_pb(item).SerializeToString()


def row_bytes(row: TimelineRow) -> bytes:
    """A serialized corral.v1.TimelineRow."""
    seconds, millis = divmod(row.timestamp_ms, 1000)
    timestamp = (b"\x08" + varint(seconds) if seconds else b"") + (
        b"\x10" + varint(millis * 1_000_000) if millis else b""
    )
    return b"".join(
        (
            b"\x08" + varint(row.seq) if row.seq else b"",
            _len_field(0x12, timestamp),
            _str_field(0x1A, row.turn_id),
            _len_field(0x22, item_bytes(row.item)),
            _str_field(0x2A, row.provider_message_id),
        )
    )


def row_appended_event(revision: int, agent_id: str, epoch: str, row: TimelineRow) -> bytes:
    """A serialized corral.v1.Event{revision, timeline_row_appended{agent_id, epoch, row}}."""
    appended = (
        _str_field(0x0A, agent_id) + _str_field(0x12, epoch) + _len_field(0x1A, row_bytes(row))
    )
    head = b"\x08" + varint(revision) if revision else b""
    return head + _len_field(0x22, appended)
