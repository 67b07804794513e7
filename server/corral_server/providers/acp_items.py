"""ACP `session/update` payloads as timeline items (how fragments are joined:
docs/design.md#coalescing).

Message and thought chunks carry no message id in ACP v1, so this mapper names them: chunks of
one kind in a row share an id (the coalescer joins them), and any other update starts a new
segment. Tool calls are remembered by id, so a `tool_call_update` (or a repeated `tool_call`,
which claude-agent-acp sends) is reported as the whole latest state. Pure: no I/O, no sink.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeAlias, cast

from acp import schema

from corral_server.domain import timeline
from corral_server.domain.timeline import JsonValue, ToolCall, ToolCallStatus
from corral_server.providers.base import ProviderItem

# What a `session/update` carries (the SDK's `SessionNotification.update`).
Update: TypeAlias = (
    schema.UserMessageChunk
    | schema.AgentMessageChunk
    | schema.AgentThoughtChunk
    | schema.ToolCallStart
    | schema.ToolCallProgress
    | schema.AgentPlanUpdate
    | schema.AgentPlanContentUpdate
    | schema.AgentPlanRemovedUpdate
    | schema.AvailableCommandsUpdate
    | schema.CurrentModeUpdate
    | schema.ConfigOptionUpdate
    | schema.SessionInfoUpdate
    | schema.UsageUpdate
)
# A tool call's report: its start, an update, or the call a permission request is about.
ToolReport: TypeAlias = schema.ToolCallStart | schema.ToolCallProgress | schema.ToolCallUpdate
ToolContent: TypeAlias = (
    schema.ContentToolCallContent | schema.FileEditToolCallContent | schema.TerminalToolCallContent
)

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

    def map(self, update: Update) -> list[ProviderItem]:
        match update:
            case schema.AgentMessageChunk() | schema.AgentThoughtChunk():
                text = text_of(update.content)
                if not text:
                    return []
                message_id = self.segment(update.session_update)
                item = (
                    timeline.AssistantMessage(text, message_id)
                    if isinstance(update, schema.AgentMessageChunk)
                    else timeline.Reasoning(text)
                )
                return [ProviderItem(self.turn_id, item, message_id)]
            case schema.ToolCallStart() | schema.ToolCallProgress():
                self._segment_kind = ""
                return self.tool_call(update)
            case schema.AgentPlanUpdate(entries=entries):
                self._segment_kind = ""
                steps = [timeline.TodoEntry(e.content, e.status == "completed") for e in entries]
                todo = timeline.Todo(tuple(steps))
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

    def tool_call(self, report: ToolReport) -> list[ProviderItem]:
        """The call's whole latest state, from a report of what changed."""
        call_id = report.tool_call_id
        if not call_id:
            return []
        calls = self._calls
        known = calls.get(call_id) or ToolCall(call_id, "tool", ToolCallStatus.PENDING)
        status = _STATUS.get(report.status or "")
        call = replace(known, status=status or known.status)
        if report.title:
            call = replace(call, name=report.title)
        given = report.model_fields_set
        if "raw_input" in given:
            call = replace(call, input=cast(JsonValue, report.raw_input))
        if "raw_output" in given:
            output = cast(JsonValue, report.raw_output)
        else:
            output = _content_text(report.content)
        if output not in (None, ""):
            call = replace(call, output=output)
        if call.status is ToolCallStatus.FAILED and not call.error:
            call = replace(call, error=str(call.output or "failed"))
        calls[call_id] = call
        return [ProviderItem(self.turn_id, call)]


def text_of(content: object) -> str:
    """The text of a text content block; "" for any other block."""
    return content.text if isinstance(content, schema.TextContentBlock) else ""


def _content_text(content: Sequence[ToolContent] | None) -> str | None:
    """The text of a tool call's content list (its `content` entries with text in them)."""
    texts = [
        text_of(c.content) for c in content or () if isinstance(c, schema.ContentToolCallContent)
    ]
    return "\n".join(t for t in texts if t) or None
