"""How many bytes a row takes on the wire, estimated from domain values (no protobuf here).

Every estimate is an upper bound of the protobuf encoding (tests/unit/timeline/test_size.py
pins that with hypothesis against the real encoder), so a page or a row that fits by these
numbers fits on the wire. The numbers that go into it:

* a string or bytes field costs its UTF-8 bytes plus a tag and a length (at most 1 + 5 bytes);
* a nested message costs its body plus a tag and a length (1 + 5);
* a JSON value is a google.protobuf.Value: a number 9 bytes, null and booleans 2, a string its
  bytes + 6, an object entry its key + value + 18, a list element its value + 6. A JSON
  number is 1-2 characters of text but 9 bytes of protobuf: that is why tool inputs are
  measured here and not by their JSON text.

Pure and fast: ASCII text (the common case) is measured in O(1) without encoding it.
"""

from __future__ import annotations

from typing import Any

from corral_server.domain import timeline as tl
from corral_server.domain.timeline import (
    AssistantMessage,
    JsonValue,
    Reasoning,
    TimelineItem,
    TimelineRow,
)

_FIELD = 6  # tag (1 byte for field numbers below 16) + length varint (at most 5 bytes)

# Per row, besides its item: the repeated-field tag and length around it, seq (tag + up to 10
# bytes), timestamp (tag, length, seconds and nanos: at most 2 + 11 + 6), the item's field.
_ROW_OVERHEAD = _FIELD + 11 + 19 + _FIELD


def text_bytes(text: str) -> int:
    """UTF-8 bytes of `text` (a lone surrogate counts as the 3 bytes of its replacement)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _str_field(text: str) -> int:
    return _FIELD + text_bytes(text) if text else 0


def json_bytes(value: JsonValue) -> int:
    """Encoded size of `value` as a google.protobuf.Value body. Walks with an explicit stack,
    so even a value nested too deep for recursion is measured; a non-JSON leaf counts as the
    text it would be shown as (see manager/sanitize.py), capped at a guess of 64 bytes."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is str:
            total += _FIELD + text_bytes(node)
        elif kind is int or kind is float:
            total += 9
        elif node is None or kind is bool:
            total += 2
        elif isinstance(node, dict):
            total += _FIELD  # struct_value field
            for key, item in node.items():
                key_bytes = text_bytes(key) if type(key) is str else 64
                total += 3 * _FIELD + key_bytes
                stack.append(item)
        elif isinstance(node, list | tuple):
            total += _FIELD  # list_value field
            total += _FIELD * len(node)
            stack.extend(node)
        else:
            total += 64
    return total


def item_bytes(item: TimelineItem) -> int:
    """Encoded size of a corral.v1.TimelineItem holding `item` (an upper bound)."""
    if type(item) is AssistantMessage:  # the hot path first: streamed text
        return _FIELD + _str_field(item.text) + _str_field(item.message_id)
    if type(item) is Reasoning:
        return _FIELD + _str_field(item.text)
    # Then the other kinds every page holds, by isinstance rather than a class pattern: a
    # match case with captures costs more, on every row a page reads.
    if isinstance(item, tl.ToolCall):
        size = 2 * _FIELD + _str_field(item.call_id) + _str_field(item.name)
        size += _str_field(item.error)
        if item.input is not None:
            size += _FIELD + json_bytes(item.input)
        if item.output is not None:
            size += _FIELD + json_bytes(item.output)
        if item.output_ref is not None:  # blob id, a size varint, two booleans
            size += _FIELD + _str_field(item.output_ref.blob_id) + 11 + 4
        return size
    if isinstance(item, tl.UserMessage):
        return (
            _FIELD
            + _str_field(item.text)
            + _str_field(item.client_message_id)
            + _str_field(item.message_id)
        )
    match item:
        case tl.Todo(entries=entries):
            return 2 * _FIELD + sum(3 * _FIELD + text_bytes(e.text) for e in entries)
        case tl.ErrorItem(message=message, code=code):
            return _FIELD + _str_field(message) + _str_field(code)
        case tl.Compaction(summary=summary):
            return _FIELD + _str_field(summary)
        case tl.SubagentNotice(run_id=run_id, child_agent_id=child, text=text):
            return _FIELD + _str_field(run_id) + _str_field(child) + _str_field(text)
        case _:
            return 64  # not a timeline item: a caller bug, measured rather than raised here


# A streamed-text row with all four strings set: the row, the item's oneof field, its text and
# message id fields, the turn id and provider message id fields.
_TEXT_ROW = _ROW_OVERHEAD + 5 * _FIELD


def row_bytes(row: TimelineRow) -> int:
    """Encoded size of a corral.v1.TimelineRow as an element of a repeated field."""
    item = row.item
    if type(item) is AssistantMessage:  # the timeline writer's hot path, measured in one step
        text, message_id, turn_id, provider_id = (
            item.text,
            item.message_id,
            row.turn_id,
            row.provider_message_id,
        )
        if text.isascii() and message_id.isascii() and turn_id.isascii() and provider_id.isascii():
            return _TEXT_ROW + len(text) + len(message_id) + len(turn_id) + len(provider_id)
    return (
        _ROW_OVERHEAD
        + item_bytes(row.item)
        + _str_field(row.turn_id)
        + _str_field(row.provider_message_id)
    )
