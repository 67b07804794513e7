"""The codec of stored timeline items: a corral.v1.TimelineItem's wire bytes.

The rpc edge injects it into the durable store (store/sqlite_timeline.py), which must not
import protobuf. Encoding is the same hand-written fast path the hub uses for streamed rows
(rpc/wire.py), so a stored item is byte for byte what a client receives; decoding goes
through protobuf and the one converter (rpc/convert.py).

Round trip: `decode(encode(item)) == item` for every item, with the caveat the wire shares:
a JSON number is a double in google.protobuf.Value, so integers beyond 2**53 lose precision
(and a float with an integral value, like 2.0, comes back as the int 2: every integral
number comes back as an int, so a tool input's `1` is `1` again, not `1.0`). Pinned by
tests/unit/rpc/test_item_codec.py.
"""

from __future__ import annotations

from dataclasses import replace

from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.domain.timeline import AssistantMessage, JsonValue, TimelineItem, ToolCall
from corral_server.rpc.convert import item_from_pb
from corral_server.rpc.wire import item_bytes


class ProtobufItemCodec:
    """An `ItemCodec` (timeline/store.py) over the wire encoding."""

    def encode(self, item: TimelineItem) -> bytes:
        return item_bytes(item)

    def decode(self, data: bytes) -> TimelineItem:
        msg = timeline_pb.TimelineItem.FromString(data)
        if msg.HasField("assistant_message"):  # the common row first
            text = msg.assistant_message
            return AssistantMessage(text.text, text.message_id)
        item = item_from_pb(msg)
        if type(item) is ToolCall and (item.input is not None or item.output is not None):
            return replace(item, input=_integral(item.input), output=_integral(item.output))
        return item


# Doubles hold every integer up to this exactly.
_EXACT_INT = 2**53


def _integral(value: JsonValue) -> JsonValue:
    """`value` with every integral float as an int (JSON has one number type)."""
    if type(value) is float:
        return int(value) if value.is_integer() and abs(value) <= _EXACT_INT else value
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


ITEM_CODEC = ProtobufItemCodec()
