"""The activity digest: a timeline rendered as plain text for humans and other agents.

The activity digest: the same rows the timeline stores, squeezed into a bounded text
for a parent agent, a notification body or `corral logs`. One block per row, oldest first (a
tool call's status updates and an assistant message's chunks are folded into one block); when
the budget is too small the NEWEST rows win (what an agent did last matters most), whole blocks
are dropped from the old end, and only a single block that alone exceeds the budget is cut.

Pure functions over domain rows: no store access, no I/O, no protobuf.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import assert_never

from corral_server.domain import timeline as tl
from corral_server.domain.timeline import JsonValue, TimelineItem, TimelineRow
from corral_server.errors import InvalidArgument

# GetActivityRequest.max_chars: "Unset or 0 = 4000" (proto/corral/v1/timeline_service.proto).
DEFAULT_ACTIVITY_MAX_CHARS = 4000
# A larger max_chars is taken as this: 500,000 characters are at most 2,000,000 bytes of UTF-8,
# within MAX_PAGE_BYTES and a default client's 4 MiB receive limit.
MAX_ACTIVITY_CHARS = 500_000

# A tool's input is a hint of what it did, not a transcript: one short line. 160 characters
# fits a typical shell command or file path while keeping ~25 tool rows in the default budget.
_TOOL_INPUT_CHARS = 160

# Input keys that say what a tool call did, most telling first (shell, file, search, web,
# sub-task tools of the common providers); other inputs are shown as compact JSON.
_TELLING_INPUT_KEYS = (
    "command",
    "cmd",
    "file_path",
    "path",
    "pattern",
    "query",
    "url",
    "description",
    "prompt",
)

ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class ActivityDigest:
    """`text` covers rows first_seq..last_seq (both 0 when no row is included); `truncated`
    says older rows were left out or the only row was cut."""

    text: str
    truncated: bool
    first_seq: int
    last_seq: int


def curate_activity(
    rows: Sequence[TimelineRow], max_chars: int = DEFAULT_ACTIVITY_MAX_CHARS
) -> ActivityDigest:
    """Digest `rows` (ascending seq) into at most `max_chars` characters (0 = the default;
    at most MAX_ACTIVITY_CHARS).
    Walks from the newest row back and stops when the budget is spent, so rows older than
    what fits are never rendered."""
    budget = _budget(max_chars)
    kept: list[str] = []
    used = 0
    first_seq = 0
    truncated = False
    for seq, block in _blocks_newest_first(rows):
        if block is None:  # an older update of a tool call already described
            first_seq = seq
            continue
        cost = len(block) + (1 if kept else 0)  # +1 for the newline joining it to the next
        if used + cost > budget:
            if not kept:
                kept.append(clip(block, budget))
                first_seq = seq
            truncated = True
            break
        kept.append(block)
        used += cost
        first_seq = seq
    if not kept:
        return ActivityDigest("", truncated, 0, 0)
    kept.reverse()
    return ActivityDigest("\n".join(kept), truncated, first_seq, rows[-1].seq)


def _blocks_newest_first(rows: Sequence[TimelineRow]) -> Iterator[tuple[int, str | None]]:
    """(oldest seq covered, text) per entry, newest first. Folds what the provider reported
    in pieces (docs/design.md#coalescing): a tool call appears once, with its latest status,
    where its newest update is (older updates yield None); consecutive chunks of one assistant
    message (same non-empty message_id) are joined into one block."""
    seen_calls: set[str] = set()
    i = len(rows) - 1
    while i >= 0:
        row = rows[i]
        match row.item:
            case tl.ToolCall(call_id=call_id) if call_id in seen_calls:
                yield row.seq, None
            case tl.ToolCall(call_id=call_id) as call:
                seen_calls.add(call_id)
                yield row.seq, describe_item(call)
            case tl.AssistantMessage(message_id=message_id) if message_id:
                start, text = _chunks(rows, i, message_id)
                yield rows[start].seq, _labelled("Assistant", text)
                i = start
            case item:
                yield row.seq, describe_item(item)
        i -= 1


def _chunks(rows: Sequence[TimelineRow], end: int, message_id: str) -> tuple[int, str]:
    """The index of the first of the consecutive chunks of `message_id` ending at `end`, and
    their joined text."""
    start = end
    texts: list[str] = []
    while start >= 0:
        match rows[start].item:
            case tl.AssistantMessage(message_id=chunk_id, text=text) if chunk_id == message_id:
                texts.append(text)
                start -= 1
            case _:
                break
    texts.reverse()
    return start + 1, "".join(texts)


def describe_item(item: TimelineItem) -> str:
    """One row as text: a line, or a short block when the message itself has several lines."""
    match item:
        case tl.UserMessage(text=text):
            return _labelled("User", text)
        case tl.AssistantMessage(text=text):
            return _labelled("Assistant", text)
        case tl.Reasoning(text=text):
            return _labelled("Thinking", text)
        case tl.ToolCall():
            return _describe_tool(item)
        case tl.Todo(entries=entries):
            listed = "; ".join(f"[{'x' if e.completed else ' '}] {e.text}" for e in entries)
            return _labelled("Todo", listed)
        case tl.ErrorItem(message=message, code=code):
            return _labelled(f"Error ({code})" if code else "Error", message)
        case tl.Compaction(summary=summary):
            return _labelled("Compaction", summary)
        case tl.SubagentNotice(child_agent_id=child, text=text):
            return _labelled(f"Subagent {child}", text)
        case _:
            assert_never(item)


def clip(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, ending in an ellipsis when cut."""
    if len(text) <= max_chars:
        return text
    if max_chars <= 0:
        return ""
    return text[: max_chars - 1] + ELLIPSIS


def _budget(max_chars: int) -> int:
    if max_chars < 0:
        raise InvalidArgument.field("max_chars", f"must be 0 (default) or more, got {max_chars}")
    return min(max_chars or DEFAULT_ACTIVITY_MAX_CHARS, MAX_ACTIVITY_CHARS)


def _labelled(label: str, text: str) -> str:
    text = text.strip()
    return f"{label}: {text}" if text else f"{label}:"


def _describe_tool(call: tl.ToolCall) -> str:
    line = _labelled(f"Tool {call.name} [{call.status.value}]", summarise_input(call.input))
    if call.error:
        line += f" -> error: {clip(_one_line(call.error), _TOOL_INPUT_CHARS)}"
    return line


def summarise_input(value: JsonValue) -> str:
    """A tool input as one short line: its most telling field, else compact JSON."""
    match value:
        case None:
            return ""
        case str():
            text = value
        case dict():
            text = _telling_field(value) or _json(value)
        case bool() | int() | float() | list():
            text = _json(value)
        case _:
            assert_never(value)
    return clip(_one_line(text), _TOOL_INPUT_CHARS)


def _telling_field(value: dict[str, JsonValue]) -> str:
    for key in _TELLING_INPUT_KEYS:
        field = value.get(key)
        if isinstance(field, str) and field.strip():
            return field
    return ""


def _json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _one_line(text: str) -> str:
    return " ".join(text.split())
