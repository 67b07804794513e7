"""What of a timeline item full-text search sees: its kind's name and its text.

Pure and cheap: it runs in the writer thread for every appended row (store/search.py), so it
only joins strings the item already holds; a tool call's JSON input and output are serialized
once, compactly. Each row's text is cut at MAX_INDEXED_CHARS: a megabyte of tool output would
cost the writer more than it is worth to a search, and its start is what a person looks for.
"""

from __future__ import annotations

import json

from corral_server.domain import timeline as tl
from corral_server.domain.timeline import JsonValue, TimelineItem

MAX_INDEXED_CHARS = 64 * 1024

# The names of item kinds, as the TimelineItem oneof on the wire names them.
ITEM_KINDS: dict[type, str] = {
    tl.UserMessage: "user_message",
    tl.AssistantMessage: "assistant_message",
    tl.Reasoning: "reasoning",
    tl.ToolCall: "tool_call",
    tl.Todo: "todo",
    tl.ErrorItem: "error",
    tl.Compaction: "compaction",
    tl.SubagentNotice: "subagent_notice",
}
KIND_NAMES = frozenset(ITEM_KINDS.values())


def kind_of(item: TimelineItem) -> str:
    return ITEM_KINDS[type(item)]


# The kinds whose text is one `text` attribute: the hot path (a burst of assistant rows) takes it
# without the match below.
PLAIN_KINDS = frozenset({tl.UserMessage, tl.AssistantMessage, tl.Reasoning, tl.SubagentNotice})


def text_of(item: TimelineItem) -> str:
    """The searchable text of `item` ('' for none), at most MAX_INDEXED_CHARS."""
    if type(item) in PLAIN_KINDS:
        return item.text[:MAX_INDEXED_CHARS]  # type: ignore[union-attr]
    match item:
        case tl.UserMessage() | tl.AssistantMessage() | tl.Reasoning():
            text = item.text
        case tl.ToolCall():
            text = "\n".join(
                part
                for part in (item.name, _json(item.input), _json(item.output), item.error)
                if part
            )
        case tl.ErrorItem():
            text = f"{item.message}\n{item.code}" if item.code else item.message
        case tl.Todo():
            text = "\n".join(entry.text for entry in item.entries)
        case tl.Compaction():
            text = item.summary
        case tl.SubagentNotice():
            text = item.text
    return text[:MAX_INDEXED_CHARS]


def _json(value: JsonValue) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
