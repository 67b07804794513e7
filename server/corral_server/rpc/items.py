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
    try:
        _set_value(out, value)
    except (RecursionError, ValueError, TypeError, OverflowError):
        try:
            text = json.dumps(value)
        except (RecursionError, ValueError, TypeError):
            text = "<JSON value too deep or invalid to encode>"
        out = struct_pb2.Value(string_value=text)
    return out


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
    match item:
        case dt.UserMessage():
            return timeline_pb.TimelineItem(
                user_message=timeline_pb.UserMessage(
                    text=item.text,
                    client_message_id=item.client_message_id,
                    message_id=item.message_id,
                )
            )
        case dt.AssistantMessage():
            return timeline_pb.TimelineItem(
                assistant_message=timeline_pb.AssistantMessage(
                    text=item.text, message_id=item.message_id
                )
            )
        case dt.Reasoning():
            return timeline_pb.TimelineItem(reasoning=timeline_pb.Reasoning(text=item.text))
        case dt.ToolCall():
            call = timeline_pb.ToolCall(
                call_id=item.call_id,
                name=item.name,
                status=_TOOL_STATUS[item.status],
                error=item.error,
            )
            if item.input is not None:
                call.input.CopyFrom(json_value(item.input))
            if item.output is not None:
                call.output.CopyFrom(json_value(item.output))
            if item.output_ref is not None:
                ref = item.output_ref
                call.output_ref.CopyFrom(
                    timeline_pb.OutputRef(
                        blob_id=ref.blob_id,
                        size_bytes=ref.size_bytes,
                        preview_truncated=ref.preview_truncated,
                        json=ref.json,
                    )
                )
            return timeline_pb.TimelineItem(tool_call=call)
        case dt.Todo():
            entries = [
                timeline_pb.TodoEntry(text=e.text, completed=e.completed) for e in item.entries
            ]
            return timeline_pb.TimelineItem(todo=timeline_pb.Todo(entries=entries))
        case dt.ErrorItem():
            return timeline_pb.TimelineItem(
                error=timeline_pb.ErrorItem(message=item.message, code=item.code)
            )
        case dt.Compaction():
            return timeline_pb.TimelineItem(compaction=timeline_pb.Compaction(summary=item.summary))
        case dt.SubagentNotice():
            return timeline_pb.TimelineItem(
                subagent_notice=timeline_pb.SubagentNotice(
                    run_id=item.run_id, child_agent_id=item.child_agent_id, text=item.text
                )
            )
        case _:
            assert_never(item)


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
