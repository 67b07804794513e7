"""Message encodings of the web edge: binary protobuf and proto3 JSON.

The binary codec sends bytes a servicer already serialized as they are (EventService's framed
batches), so a Subscribe stream costs no protobuf work per subscriber. The JSON codec prints
with protobuf's json_format, about 30 us per event here: for such a batch it prints each
event's frame once and keeps the text (`EventJson`), since every JSON subscriber is sent the
same frames, only cut into batches differently.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from corral.v1 import event_service_pb2 as event_pb


class BodyError(ValueError):
    """A request body that does not decode as the method's request message."""


class ProtoCodec:
    name = "proto"

    def decode(self, data: bytes, message_type: type[Message]) -> Message:
        try:
            return message_type.FromString(data)
        except (DecodeError, UnicodeDecodeError) as exc:
            raise BodyError(str(exc) or type(exc).__name__) from None

    def encode(self, item: Message | bytes, message_type: type[Message]) -> bytes:
        return item if isinstance(item, bytes) else item.SerializeToString()


# A batch is a serialized message whose only field is `repeated Event events = 1`
# (SubscribeResponse): frames of tag 0x0a, a varint length, and the Event's bytes.
_EVENTS_TAG = 0x0A
# Printed events kept, at most so many and so many bytes (frame plus text): a live stream's
# frames are a few hundred bytes, but one row may be a megabyte.
EVENT_JSON_ENTRIES = 8_192
EVENT_JSON_BYTES = 16 * 1024 * 1024


class EventJson:
    """Each framed event printed once: an LRU of event bytes -> JSON text."""

    def __init__(
        self,
        event_type: type[Message],
        entries: int = EVENT_JSON_ENTRIES,
        max_bytes: int = EVENT_JSON_BYTES,
    ) -> None:
        self._event_type = event_type
        self._entries = entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._printed: OrderedDict[bytes, str] = OrderedDict()

    def batch(self, data: bytes) -> bytes | None:
        """The JSON of a SubscribeResponse-shaped batch; None when `data` is not one."""
        texts: list[str] = []
        at, end = 0, len(data)
        while at < end:
            if data[at] != _EVENTS_TAG:
                return None
            length, at = _varint(data, at + 1)
            if at + length > end:
                return None
            texts.append(self._event(data[at : at + length]))
            at += length
        return ('{"events":[' + ",".join(texts) + "]}").encode() if texts else b"{}"

    def _event(self, frame: bytes) -> str:
        text = self._printed.get(frame)
        if text is not None:
            self._printed.move_to_end(frame)
            return text
        message = self._event_type.FromString(frame)
        text = json.dumps(
            json_format.MessageToDict(message), separators=(",", ":"), ensure_ascii=False
        )
        self._printed[frame] = text
        self._bytes += len(frame) + len(text)
        while len(self._printed) > self._entries or self._bytes > self._max_bytes:
            old_frame, old_text = self._printed.popitem(last=False)
            self._bytes -= len(old_frame) + len(old_text)
        return text


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


class JsonCodec:
    name = "json"

    def __init__(self, printing_events: Mapping[type[Message], type[Message]]) -> None:
        """`printing_events`: the pre-encoded batch types (EventService's) printed event by
        event, each event's text kept, with the event type their frames hold."""
        self._batches = {batch: EventJson(event) for batch, event in printing_events.items()}

    def decode(self, data: bytes, message_type: type[Message]) -> Message:
        message = message_type()
        try:
            text = data.decode() or "{}"
            if not text.lstrip().startswith("{"):
                raise BodyError("a JSON request is an object ({...})")
            # Unknown fields are ignored, as Connect's own servers do: a newer client may send
            # fields this daemon does not know yet.
            json_format.Parse(text, message, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, RecursionError) as exc:
            raise BodyError(str(exc) or type(exc).__name__) from None
        return message

    def encode(self, item: Message | bytes, message_type: type[Message]) -> bytes:
        if isinstance(item, bytes):
            printer = self._batches.get(message_type)
            printed = printer.batch(item) if printer is not None else None
            if printed is not None:
                return printed
        message = message_type.FromString(item) if isinstance(item, bytes) else item
        as_dict = json_format.MessageToDict(message)
        return json.dumps(as_dict, separators=(",", ":"), ensure_ascii=False).encode()


PROTO = ProtoCodec()
JSON = JsonCodec({event_pb.SubscribeResponse: event_pb.Event})
Codec = ProtoCodec | JsonCodec
