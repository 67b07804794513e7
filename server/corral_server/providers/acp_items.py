"""ACP `session/update` payloads as timeline items (seed 000, section 6.2).

Message and thought chunks carry no message id in ACP v1, so this mapper names them: chunks of
one kind in a row share an id (the coalescer joins them), and any other update starts a new
segment. Tool calls are remembered by id, so a `tool_call_update` (or a repeated `tool_call`,
which claude-agent-acp sends) is reported as the whole latest state. Pure: no I/O, no sink.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from corral_server.domain.timeline import (
    AssistantMessage,
    JsonValue,
    Reasoning,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
)
from corral_server.providers.base import ProviderItem

_STATUS = {
    "pending": ToolCallStatus.PENDING,
    "in_progress": ToolCallStatus.RUNNING,
    "completed": ToolCallStatus.COMPLETED,
    "failed": ToolCallStatus.FAILED,
}


@dataclass(slots=True)
class ItemMapper:
    turn_id: str = ""
    _segment_kind: str = ""
    _segment_id: str = ""
    _segments: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    # Every tool call of the turn by id, in its latest state.
    _calls: dict[str, ToolCall] = field(default_factory=dict)

    def start_turn(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self._segment_kind = ""
        self._segments = itertools.count(1)
        self._calls = {}

    def tool_name(self, call_id: str) -> str:
        call = self._calls.get(call_id)
        return call.name if call is not None else ""

    def map(self, update: Mapping[str, JsonValue]) -> list[ProviderItem]:
        kind = str(update.get("sessionUpdate", ""))
        match kind:
            case "agent_message_chunk" | "agent_thought_chunk":
                text = _text(update.get("content"))
                if not text:
                    return []
                message_id = self.segment(kind)
                item = (
                    AssistantMessage(text, message_id)
                    if kind == "agent_message_chunk"
                    else Reasoning(text)
                )
                return [ProviderItem(self.turn_id, item, message_id)]
            case "tool_call" | "tool_call_update":
                self._segment_kind = ""
                call = self._tool_call(update)
                return [ProviderItem(self.turn_id, call)] if call is not None else []
            case "plan":
                self._segment_kind = ""
                entries = update.get("entries")
                if not isinstance(entries, list):
                    return []
                todo = Todo(
                    tuple(
                        TodoEntry(str(e.get("content", "")), e.get("status") == "completed")
                        for e in entries
                        if isinstance(e, dict)
                    )
                )
                return [ProviderItem(self.turn_id, todo)]
            case _:
                # user_message_chunk (corral stores the prompt itself), available commands,
                # mode changes: nothing for the timeline yet.
                return []

    def segment(self, kind: str) -> str:
        if kind != self._segment_kind:
            self._segment_kind = kind
            self._segment_id = f"{self.turn_id}-{next(self._segments)}"
        return self._segment_id

    def _tool_call(self, update: Mapping[str, JsonValue]) -> ToolCall | None:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            return None
        calls = self._calls
        known = calls.get(call_id) or ToolCall(call_id, "tool", ToolCallStatus.PENDING)
        status = _STATUS.get(str(update.get("status")))
        call = replace(known, status=status or known.status)
        if isinstance(title := update.get("title"), str) and title:
            call = replace(call, name=title)
        if "rawInput" in update:
            call = replace(call, input=update["rawInput"])
        output = update.get("rawOutput", _content_text(update.get("content")))
        if output not in (None, ""):
            call = replace(call, output=output)
        if call.status is ToolCallStatus.FAILED and not call.error:
            call = replace(call, error=str(call.output or "failed"))
        calls[call_id] = call
        return call


def _text(content: JsonValue) -> str:
    if isinstance(content, dict) and content.get("type") == "text":
        text = content.get("text")
        return text if isinstance(text, str) else ""
    return ""


def _content_text(content: JsonValue) -> JsonValue:
    """The text of a tool call's content list (`{"type":"content","content":{text}}`)."""
    if not isinstance(content, list):
        return None
    texts = [
        _text(c.get("content"))
        for c in content
        if isinstance(c, dict) and c.get("type") == "content"
    ]
    return "\n".join(t for t in texts if t) or None
