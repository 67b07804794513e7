"""Message encodings of the web edge: binary protobuf and proto3 JSON.

The binary codec sends bytes a servicer already serialized as they are (EventService's framed
batches), so a Subscribe stream costs no protobuf work per subscriber; the JSON codec decodes
those bytes once to print them with protobuf's json_format.
"""

from __future__ import annotations

import json

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message


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


class JsonCodec:
    name = "json"

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
        message = message_type.FromString(item) if isinstance(item, bytes) else item
        as_dict = json_format.MessageToDict(message)
        return json.dumps(as_dict, separators=(",", ":"), ensure_ascii=False).encode()


PROTO = ProtoCodec()
JSON = JsonCodec()
Codec = ProtoCodec | JsonCodec
