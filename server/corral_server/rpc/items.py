"""Timeline values <-> protobuf: timestamps, JSON values, items, rows and cursors.

Below both convert.py (which re-exports these names) and wire.py (the hand-written row
encoder, which embeds `item_to_pb` for items it does not write itself), so neither imports the
other. Round-trips are pinned by tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, assert_never, cast

from google.protobuf import json_format, struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.domain import timeline as dt

# --- scalars ------------------------------------------------------------------------------


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp_ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def json_value(value: dt.JsonValue) -> struct_pb2.Value:
    """Never fails: a value protobuf cannot hold (nested past its depth limit, say) travels
    as its JSON text, so one odd tool input cannot make a row unencodable."""
    out = struct_pb2.Value()
    set_json(out, value)
    return out


def set_json(out: struct_pb2.Value, value: dt.JsonValue) -> None:
    """`json_value` written into `out` (a fresh Value) in place, sparing a copy."""
    try:
        _set_value(out, value)
    except (RecursionError, ValueError, TypeError, OverflowError):
        try:
            text = json.dumps(value)
        except (RecursionError, ValueError, TypeError):
            text = "<JSON value too deep or invalid to encode>"
        out.Clear()
        out.string_value = text


# Objects and arrays nested deeper than this are refused (as json_format.ParseDict does): a
# deeper Value would pass protobuf's decoding depth limit inside an event.
MAX_JSON_DEPTH = 49


def _set_value(out: struct_pb2.Value, value: dt.JsonValue) -> None:
    # What json_format.ParseDict does for a Value, through the well-known types' own
    # setters (Struct.update, ListValue.extend): about 3x faster on a tool's input.
    if isinstance(value, dict):
        _check_depth(value, MAX_JSON_DEPTH)
        out.struct_value.SetInParent()  # an empty object is still an object
        out.struct_value.update(value)
    elif isinstance(value, (list, tuple)):
        _check_depth(value, MAX_JSON_DEPTH)
        out.list_value.SetInParent()
        # The setter takes lists and dicts at any depth; its stub says Struct and ListValue.
        out.list_value.extend(cast(Any, value))
    elif value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):  # before int: a bool is an int too
        out.bool_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, (int, float)):
        out.number_value = value
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def _check_depth(value: dt.JsonValue, room: int) -> None:
    if isinstance(value, dict):
        children: Iterable[dt.JsonValue] = value.values()
    elif isinstance(value, (list, tuple)):
        children = value
    else:
        return
    if room == 0:
        raise ValueError("JSON nested too deep")
    for child in children:
        _check_depth(child, room - 1)


def json_from_value(value: struct_pb2.Value) -> dt.JsonValue:
    result: dt.JsonValue = json_format.MessageToDict(value)
    return result


# --- timeline -----------------------------------------------------------------------------

_TOOL_STATUS = {
    dt.ToolCallStatus.PENDING: timeline_pb.TOOL_CALL_STATUS_PENDING,
    dt.ToolCallStatus.RUNNING: timeline_pb.TOOL_CALL_STATUS_RUNNING,
    dt.ToolCallStatus.COMPLETED: timeline_pb.TOOL_CALL_STATUS_COMPLETED,
    dt.ToolCallStatus.FAILED: timeline_pb.TOOL_CALL_STATUS_FAILED,
    dt.ToolCallStatus.CANCELED: timeline_pb.TOOL_CALL_STATUS_CANCELED,
}
_TOOL_STATUS_BACK = {v: k for k, v in _TOOL_STATUS.items()}


def item_to_pb(item: dt.TimelineItem) -> timeline_pb.TimelineItem:
    msg = timeline_pb.TimelineItem()
    item_into(msg, item)
    return msg


def item_into(out: timeline_pb.TimelineItem, item: dt.TimelineItem) -> None:
    """`item` written into `out` (a fresh TimelineItem, say a field of the message being
    built) in place: no submessage is built apart and copied in."""
    match item:
        case dt.AssistantMessage():
            message = out.assistant_message
            message.SetInParent()
            message.text, message.message_id = item.text, item.message_id
        case dt.UserMessage():
            user = out.user_message
            user.SetInParent()
            user.text, user.client_message_id = item.text, item.client_message_id
            user.message_id = item.message_id
        case dt.Reasoning():
            out.reasoning.SetInParent()
            out.reasoning.text = item.text
        case dt.ToolCall():
            _call_into(out.tool_call, item)
        case dt.Todo():
            todo = out.todo
            todo.SetInParent()
            for e in item.entries:
                todo.entries.add(text=e.text, completed=e.completed)
        case dt.ErrorItem():
            out.error.SetInParent()
            out.error.message, out.error.code = item.message, item.code
        case dt.Compaction():
            out.compaction.SetInParent()
            out.compaction.summary = item.summary
        case dt.SubagentNotice():
            notice = out.subagent_notice
            notice.SetInParent()
            notice.run_id, notice.child_agent_id = item.run_id, item.child_agent_id
            notice.text = item.text
        case _:
            assert_never(item)


def _call_into(call: timeline_pb.ToolCall, item: dt.ToolCall) -> None:
    call.SetInParent()
    call.call_id, call.name, call.error = item.call_id, item.name, item.error
    call.status = _TOOL_STATUS[item.status]
    if item.input is not None:
        set_json(call.input, item.input)
    if item.output is not None:
        set_json(call.output, item.output)
    if item.output_ref is not None:
        ref, out = item.output_ref, call.output_ref
        out.SetInParent()
        out.blob_id, out.size_bytes = ref.blob_id, ref.size_bytes
        out.preview_truncated, out.json = ref.preview_truncated, ref.json


def item_from_pb(msg: timeline_pb.TimelineItem) -> dt.TimelineItem:
    kind = msg.WhichOneof("kind")
    if kind == "user_message":
        u = msg.user_message
        return dt.UserMessage(u.text, u.client_message_id, u.message_id)
    if kind == "assistant_message":
        return dt.AssistantMessage(msg.assistant_message.text, msg.assistant_message.message_id)
    if kind == "reasoning":
        return dt.Reasoning(msg.reasoning.text)
    if kind == "tool_call":
        t = msg.tool_call
        return dt.ToolCall(
            call_id=t.call_id,
            name=t.name,
            status=_TOOL_STATUS_BACK.get(t.status, dt.ToolCallStatus.PENDING),
            input=json_from_value(t.input) if t.HasField("input") else None,
            output=json_from_value(t.output) if t.HasField("output") else None,
            error=t.error,
            output_ref=_output_ref(t),
        )
    if kind == "todo":
        return dt.Todo(tuple(dt.TodoEntry(e.text, e.completed) for e in msg.todo.entries))
    if kind == "error":
        return dt.ErrorItem(msg.error.message, msg.error.code)
    if kind == "compaction":
        return dt.Compaction(msg.compaction.summary)
    if kind == "subagent_notice":
        n = msg.subagent_notice
        return dt.SubagentNotice(n.run_id, n.child_agent_id, n.text)
    raise ValueError(f"timeline item has no kind set: {msg!r}")


def row_to_pb(row: dt.TimelineRow) -> timeline_pb.TimelineRow:
    return timeline_pb.TimelineRow(
        seq=row.seq,
        timestamp=timestamp(row.timestamp_ms),
        turn_id=row.turn_id,
        item=item_to_pb(row.item),
        provider_message_id=row.provider_message_id,
    )


def row_from_pb(msg: timeline_pb.TimelineRow) -> dt.TimelineRow:
    return dt.TimelineRow(
        seq=msg.seq,
        timestamp_ms=timestamp_ms(msg.timestamp),
        item=item_from_pb(msg.item),
        turn_id=msg.turn_id,
        provider_message_id=msg.provider_message_id,
    )


def cursor_to_pb(cursor: dt.Cursor) -> timeline_pb.Cursor:
    return timeline_pb.Cursor(epoch=cursor.epoch, seq=cursor.seq)


def cursor_from_pb(msg: timeline_pb.Cursor) -> dt.Cursor:
    return dt.Cursor(epoch=msg.epoch, seq=msg.seq)


def _output_ref(call: timeline_pb.ToolCall) -> dt.OutputRef | None:
    if not call.HasField("output_ref"):
        return None
    ref = call.output_ref
    return dt.OutputRef(ref.blob_id, ref.size_bytes, ref.preview_truncated, ref.json)
