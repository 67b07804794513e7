"""Rows too big to store: the split and cut rules that keep every row within MAX_ROW_BYTES.

A row's size is its encoded size as estimated by timeline/size.py. Nothing is ever dropped
without a trace:

* Assistant and reasoning text is SPLIT (the coalescer does it with `text_pieces`): a message
  whose text would make its row bigger than the limit is stored as several consecutive rows
  with the same message id, each as full as the limit allows, cut between two characters
  (never inside one). Joining their texts in seq order gives the message back exactly.
* Any other item is CUT (`fit_item`): its largest fields are cut to one common size, just
  small enough that the row fits; fields already below that size are kept whole. A cut text
  keeps its beginning and ends with the marker "… [cut by corral: N bytes]" (N = its
  original UTF-8 size). A cut JSON value (a tool input or output) becomes a string: the
  beginning of its compact JSON text and the marker "… [cut by corral: N bytes of JSON]".
  A todo list keeps its first entries that fit (each entry's text cut to a quarter of the
  limit) and ends with an entry "[cut by corral: K more entries, N bytes]".

Pure logic, no protobuf.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from corral_server.domain.timeline import (
    MAX_ROW_BYTES,
    AssistantMessage,
    JsonValue,
    Reasoning,
    TimelineItem,
    Todo,
    TodoEntry,
)
from corral_server.manager.sanitize import sanitize_text
from corral_server.timeline.size import item_bytes, json_bytes, text_bytes

# A string field costs its bytes plus at most this much (tag and length), see size.py.
_FIELD = 6
# Room kept for a marker: "… [cut by corral: 99999999999 bytes of JSON]" is 45 bytes.
_MARKER_ROOM = 64

# A provider's error message or cancel reason is kept up to this many UTF-8 bytes (it lands in
# the error row, the terminal event and Agent.last_error: each far below a row's limit); an
# error code up to MAX_CODE_BYTES.
MAX_ERROR_BYTES = 16 * 1024
MAX_CODE_BYTES = 256


def text_pieces(text: str, max_bytes: int) -> list[str]:
    """`text` cut into consecutive pieces of at most `max_bytes` UTF-8 bytes each, each as
    long as it can be, cut between characters. "".join(pieces) == text."""
    if max_bytes < 4:
        raise ValueError(f"max_bytes must leave room for one character, got {max_bytes}")
    if text.isascii():
        return [text[i : i + max_bytes] for i in range(0, len(text), max_bytes)] or [""]
    raw = text.encode("utf-8", "surrogatepass")
    pieces = []
    start = 0
    while len(raw) - start > max_bytes:
        end = start + max_bytes
        while raw[end] & 0xC0 == 0x80:  # a continuation byte: back off to the char's start
            end -= 1
        pieces.append(raw[start:end].decode("utf-8", "surrogatepass"))
        start = end
    pieces.append(raw[start:].decode("utf-8", "surrogatepass"))
    return pieces


def cut_text(text: str, max_bytes: int, what: str = "bytes") -> str:
    """`text` itself when it has at most `max_bytes` UTF-8 bytes, else its beginning and a
    marker naming its size, `max_bytes` in all."""
    size = text_bytes(text)
    if size <= max_bytes:
        return text
    marker = f"… [cut by corral: {size} {what}]"
    keep = max(0, max_bytes - text_bytes(marker))
    head = text_pieces(text, keep)[0] if keep >= 4 else ""
    return head + marker


def fit_item(item: TimelineItem, max_bytes: int = MAX_ROW_BYTES) -> TimelineItem:
    """`item` itself when it fits in `max_bytes`, else `item` cut by the module's rules.
    Assistant and reasoning text is not cut here: the coalescer splits it."""
    size = item_bytes(item)
    if size <= max_bytes:
        return item
    if isinstance(item, AssistantMessage | Reasoning):
        raise ValueError("assistant and reasoning text is split, not cut: use text_pieces")
    if isinstance(item, Todo):
        return _fit_todo(item, max_bytes)
    return _fit_fields(item, size, max_bytes)


def _fit_fields(item: Any, size: int, max_bytes: int) -> TimelineItem:
    """Cut the largest string and JSON fields of `item` to a common size so it fits."""
    fields: dict[str, int] = {}
    for name in item.__dataclass_fields__:
        value = getattr(item, name)
        if isinstance(value, str):
            fields[name] = _FIELD + text_bytes(value) if value else 0
        elif name in ("input", "output") and value is not None:
            fields[name] = _FIELD + json_bytes(value)
    fixed = size - sum(fields.values())
    cap = _water_level(sorted(fields.values()), max_bytes - fixed - _MARKER_ROOM)
    changes: dict[str, Any] = {}
    for name, field_size in fields.items():
        if field_size <= cap:
            continue
        value = getattr(item, name)
        if isinstance(value, str):
            changes[name] = cut_text(value, cap - _FIELD)
        else:
            changes[name] = cut_json(value, cap - 2 * _FIELD)
    fitted: TimelineItem = replace(item, **changes)
    return fitted


def _water_level(sizes: Sequence[int], budget: int) -> int:
    """The largest cap such that sum(min(size, cap)) <= budget (`sizes` ascending)."""
    remaining = budget
    for i, size in enumerate(sizes):
        left = len(sizes) - i
        if size * left > remaining:
            return max(_MARKER_ROOM, remaining // left)
        remaining -= size
    return sizes[-1] if sizes else 0


def cut_json(value: JsonValue, max_bytes: int) -> str:
    """The beginning of `value`'s compact JSON text and a marker, `max_bytes` in all."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (RecursionError, ValueError, TypeError):
        return cut_text("<JSON value that cannot be shown>", max_bytes)
    return cut_text(text, max_bytes, "bytes of JSON")


def _fit_todo(todo: Todo, max_bytes: int) -> Todo:
    budget = max_bytes - 2 * _FIELD - _MARKER_ROOM - 3 * _FIELD
    kept: list[TodoEntry] = []
    for i, entry in enumerate(todo.entries):
        text = cut_text(entry.text, max_bytes // 4)
        cost = 3 * _FIELD + text_bytes(text)
        if cost > budget:
            rest = todo.entries[i:]
            dropped = sum(text_bytes(e.text) for e in rest)
            marker = f"[cut by corral: {len(rest)} more entries, {dropped} bytes]"
            return Todo((*kept, TodoEntry(marker)))
        budget -= cost
        kept.append(entry if text is entry.text else TodoEntry(text, entry.completed))
    return Todo(tuple(kept))


def bounded_text(text: str, max_bytes: int = MAX_ERROR_BYTES) -> str:
    """Provider text for an error or a reason: encodable, and cut (with a marker) to size."""
    return cut_text(sanitize_text(text), max_bytes)
