"""Provider output made encodable: what a provider reports is cleaned here, before the timeline
writer stores it, so that no row can fail to encode after it was stored.

Rules (each keeps what can be kept and says what it replaced):

* Text: a lone surrogate (what `json.loads` makes of "\\ud800", and what a real agent can
  emit) becomes U+FFFD; a high surrogate followed by a low one becomes the character they
  encode. Everything else, NUL included, is left unchanged.
* JSON values (tool inputs and outputs): every string and every object key is cleaned as
  text; an object key that is not a string becomes its JSON text (`1` -> "1", None ->
  "null"); a tuple becomes a list. A number that is not finite becomes the string "NaN",
  "Infinity" or "-Infinity" (as in protobuf's JSON mapping). An integer too big for a double
  becomes its decimal text.
  An object or list nested deeper than MAX_JSON_DEPTH becomes its compact JSON text (a
  string), so that no client's protobuf decoder hits its nesting limit. Any other value
  (bytes, sets, objects) becomes the string "<TYPE: TEXT>" with its str() cut to 1,000
  characters.
* Other fields: a text field that holds no string becomes "" for None, its text for a
  number; a tool status that is no tl.ToolCallStatus becomes PENDING.

Fast: ASCII text is known clean in O(1), other text is checked by encoding it once, and an item
with nothing to clean is returned as the same object. Pure: no protobuf, no I/O.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from typing import Any, TypeVar, assert_never

from corral_server.domain import timeline as tl
from corral_server.domain.timeline import AssistantMessage, JsonValue, TimelineItem

# upb (protobuf's Python, C and PHP runtime) and the C++ and Java runtimes refuse messages
# nested more than 100 deep. A JSON object level costs 3 (Value, Struct, FieldsEntry) and an
# Event wraps a tool input in 6 more: 31 object levels were measured to be the most a Python
# client decodes. 20 leaves room for future wrappers.
MAX_JSON_DEPTH = 20

_MAX_SHOWN_CHARS = 1_000
_T = TypeVar("_T")
_FLOAT_MAX_INT = int(sys.float_info.max)


def sanitize_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD; `text` itself when it has none."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        # UTF-16 pairs a high and a low surrogate into their character; a lone one is an
        # error the "replace" handler turns into U+FFFD.
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def sanitize_item(item: TimelineItem) -> TimelineItem:
    """`item` with every string and JSON value made encodable; `item` itself when clean."""
    if type(item) is AssistantMessage:  # the hot path: streamed text, before any matching
        text, message_id = item.text, item.message_id
        plain = type(text) is str and type(message_id) is str
        if plain and text.isascii() and message_id.isascii():
            return item
    t = _text
    match item:
        case AssistantMessage(text=text, message_id=message_id):
            return _changed(item, text=t(text), message_id=t(message_id))
        case tl.Reasoning(text=text):
            return _changed(item, text=t(text))
        case tl.UserMessage(text=text, client_message_id=client_id, message_id=message_id):
            return _changed(
                item, text=t(text), client_message_id=t(client_id), message_id=t(message_id)
            )
        case tl.ToolCall():
            status = item.status if isinstance(item.status, tl.ToolCallStatus) else None
            return _changed(
                item,
                call_id=t(item.call_id),
                name=t(item.name),
                status=status or tl.ToolCallStatus.PENDING,
                input=sanitize_json(item.input),
                output=sanitize_json(item.output),
                error=t(item.error),
            )
        case tl.Todo(entries=entries):
            clean = tuple(_entry(e) for e in entries)
            if type(entries) is tuple and all(a is b for a, b in zip(clean, entries, strict=True)):
                return item
            return tl.Todo(clean)
        case tl.ErrorItem(message=message, code=code):
            return _changed(item, message=t(message), code=t(code))
        case tl.Compaction(summary=summary):
            return _changed(item, summary=t(summary))
        case tl.SubagentNotice(run_id=run_id, child_agent_id=child, text=text):
            return _changed(item, run_id=t(run_id), child_agent_id=t(child), text=t(text))
        case _:
            assert_never(item)


def sanitize_json(value: JsonValue) -> JsonValue:
    """`value` made safe for a google.protobuf.Value (see the module docstring); `value`
    itself when it already is."""
    return _json(value, 0)


def _changed(item: _T, **fields: Any) -> _T:
    """`item` when every field is the same object already, else a copy with `fields`."""
    for name, value in fields.items():
        if getattr(item, name) is not value:
            return replace(item, **fields)  # type: ignore[type-var]
    return item


def _text(value: object) -> str:
    if type(value) is str:
        return sanitize_text(value)
    if value is None:
        return ""
    return _scalar_text(value)


def _scalar_text(value: object) -> str:
    """A key or a text field that holds no str: a number or a str subclass as its own text,
    None as JSON's "null" (keys only: text fields map None to ""), anything else shown."""
    if isinstance(value, str):
        return sanitize_text(str.__str__(value))
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return _big_int(int(value))
    if isinstance(value, float):
        return json.dumps(float(value))
    return _shown(value)


def _entry(entry: tl.TodoEntry) -> tl.TodoEntry:
    if not isinstance(entry, tl.TodoEntry):
        return tl.TodoEntry(_text(entry))
    return _changed(entry, text=_text(entry.text), completed=bool(entry.completed))


def _json(value: Any, depth: int) -> JsonValue:
    kind = type(value)
    if kind is str:
        return sanitize_text(value)
    if value is None or kind is bool:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return value if -_FLOAT_MAX_INT <= value <= _FLOAT_MAX_INT else _big_int(value)
    if kind is float:
        if math.isfinite(value):
            return value  # type: ignore[no-any-return]
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        if depth >= MAX_JSON_DEPTH:
            return _json_text(value)
        return _object(value, depth + 1)
    if isinstance(value, list | tuple):
        if depth >= MAX_JSON_DEPTH:
            return _json_text(value)
        return _array(value, depth + 1)
    if isinstance(value, bool | int | float | str):  # subclasses: plain values of their base
        return _json(_base_value(value), depth)
    return _shown(value)


def _object(value: dict[Any, Any], depth: int) -> JsonValue:
    out: dict[str, JsonValue] | None = None if type(value) is dict else {}
    for i, (key, item) in enumerate(value.items()):
        clean_key = sanitize_text(key) if type(key) is str else _scalar_text(key)
        clean = _json(item, depth)
        if out is None:
            if clean_key is key and clean is item:
                continue
            out = dict(list(value.items())[:i])
        out[clean_key] = clean
    return value if out is None else out


def _array(value: list[Any] | tuple[Any, ...], depth: int) -> JsonValue:
    out: list[JsonValue] | None = None if type(value) is list else []
    for i, item in enumerate(value):
        clean = _json(item, depth)
        if out is None:
            if clean is item:
                continue
            out = list(value[:i])
        out.append(clean)
    return value if out is None else out  # type: ignore[return-value]


def _base_value(value: bool | int | float | str) -> bool | int | float | str:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    raise AssertionError("unreachable")


def _big_int(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        return f"<int: {value.bit_length()} bits>"


def _json_text(value: object) -> str:
    """Compact JSON text of a value nested too deep to travel as a protobuf Value."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_shown)
    except (RecursionError, ValueError, TypeError):
        return f"<{type(value).__name__} nested too deep to show>"
    return sanitize_text(text)


def _shown(value: object) -> str:
    """A non-JSON value as text: "<TYPE: str(value)>", cut to a readable length."""
    name = type(value).__name__
    try:
        text = str(value)
    except Exception:  # a provider's object with a broken __str__
        return f"<{name}>"
    if len(text) > _MAX_SHOWN_CHARS:
        text = text[:_MAX_SHOWN_CHARS] + "…"
    return f"<{name}: {sanitize_text(text)}>"
