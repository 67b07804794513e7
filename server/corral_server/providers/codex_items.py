"""Codex app-server notifications as timeline items, and a turn's token usage (how fragments
are joined: docs/design.md#coalescing).

Codex names every item (`itemId`), so a message's deltas share that id as their
provider_message_id (the coalescer joins them), and a tool-like item (a command, a patch, an
MCP or dynamic tool call, a web search) is one ToolCall whose later states replace the earlier.
A streamed item never needs its `item/completed` (after an interrupt or a steer codex drops
the partial item and never completes it); one that was not streamed is reported whole when it
completes. Pure: no I/O, no sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from corral_server.domain.agent import Usage
from corral_server.domain.timeline import (
    AssistantMessage,
    JsonValue,
    Reasoning,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.providers import codex_protocol as protocol
from corral_server.providers.base import ProviderItem
from corral_server.providers.codex_protocol import ThreadItem

# CommandExecutionStatus / PatchApplyStatus / McpToolCallStatus / DynamicToolCallStatus.
_STATUS = {
    "inProgress": ToolCallStatus.RUNNING,
    "completed": ToolCallStatus.COMPLETED,
    "failed": ToolCallStatus.FAILED,
    "declined": ToolCallStatus.FAILED,
}
# Tool-like item types and the tool name corral shows (codex's own tool names).
_TOOL_NAMES = {
    "commandExecution": "shell",
    "fileChange": "apply_patch",
    "webSearch": "web_search",
    "imageView": "view_image",
}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(slots=True)
class ItemMapper:
    turn_id: str = ""
    # Text already reported per item id (deltas), so a completed item adds only what is new.
    _streamed: dict[str, str] = field(default_factory=dict)
    # Every tool call of the turn by item id, in its latest state (approvals show it).
    _calls: dict[str, ToolCall] = field(default_factory=dict)

    def start_turn(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self._streamed = {}
        self._calls = {}

    def tool_call(self, item_id: str) -> ToolCall | None:
        return self._calls.get(item_id)

    def completed(self, item: ThreadItem) -> list[ProviderItem]:
        """A whole item of a finished turn (`thread/resume` history)."""
        return self._item(item, True)

    def map(self, method: str, params: Mapping[str, JsonValue]) -> list[ProviderItem]:
        """The items one notification of the running turn carries (most carry none)."""
        match method:
            case "item/agentMessage/delta":
                delta = cast(protocol.AgentMessageDeltaNotification, params)
                return self._text(_str(delta.get("itemId")), _str(delta.get("delta")), True)
            case "item/reasoning/summaryTextDelta":
                summary = cast(protocol.ReasoningSummaryTextDeltaNotification, params)
                return self._text(_str(summary.get("itemId")), _str(summary.get("delta")), False)
            case "item/reasoning/summaryPartAdded":
                part = cast(protocol.ReasoningSummaryPartAddedNotification, params)
                first = part.get("summaryIndex") in (0, None)
                item_id = _str(part.get("itemId"))
                return [] if first else self._text(item_id, "\n\n", False)
            case "item/reasoning/textDelta":
                text = cast(protocol.ReasoningTextDeltaNotification, params)
                item_id = f"{_str(text.get('itemId'))}-text"
                return self._text(item_id, _str(text.get("delta")), False)
            case "item/started" | "item/completed":
                item = cast(protocol.ItemCompletedNotification, params).get("item")
                if not isinstance(item, dict):
                    return []
                return self._item(item, method == "item/completed")
            case "turn/plan/updated":
                return self._plan(cast(protocol.TurnPlanUpdatedNotification, params).get("plan"))
            case _:
                return []

    def _text(self, item_id: str, text: str, assistant: bool) -> list[ProviderItem]:
        if not item_id or not text:
            return []
        self._streamed[item_id] = self._streamed.get(item_id, "") + text
        item = AssistantMessage(text, item_id) if assistant else Reasoning(text)
        return [ProviderItem(self.turn_id, item, item_id)]

    def _rest(self, item_id: str, whole: str, assistant: bool) -> list[ProviderItem]:
        """A completed text item: what its deltas did not already carry."""
        seen = self._streamed.get(item_id, "")
        if not whole.startswith(seen):
            return []  # streamed differently: the deltas stand
        return self._text(item_id, whole[len(seen) :], assistant)

    def _item(self, item: ThreadItem, completed: bool) -> list[ProviderItem]:
        kind, item_id = _str(item.get("type")), _str(item.get("id"))
        if not item_id:
            return []
        match kind:
            case "agentMessage":
                return self._rest(item_id, _str(item.get("text")), True) if completed else []
            case "reasoning":
                if not completed:
                    return []
                summary = item.get("summary")
                parts = (
                    [p for p in summary if isinstance(p, str)] if isinstance(summary, list) else []
                )
                return self._rest(item_id, "\n\n".join(parts), False)
            case "commandExecution" | "fileChange" | "mcpToolCall" | "dynamicToolCall":
                return [self._call(_tool_call(kind, item_id, item, completed))]
            case "webSearch" | "imageView":
                return [self._call(_tool_call(kind, item_id, item, completed))]
            case "userMessage":
                # The prompt back under codex's item id: corral stored the prompt itself, so
                # this is its echo, which confirms it (docs/design.md#echo-and-rewind).
                item = cast(protocol.UserMessageThreadItem, item)
                return _user_message(self.turn_id, item) if completed else []
            case _:
                # plan (turn/plan/updated has the steps), compaction, review markers: nothing
                # for the timeline yet.
                return []

    def _call(self, call: ToolCall) -> ProviderItem:
        self._calls[call.call_id] = call
        return ProviderItem(self.turn_id, call)

    def _plan(self, plan: object) -> list[ProviderItem]:
        if not isinstance(plan, list):
            return []
        entries = tuple(
            TodoEntry(_str(step.get("step")), step.get("status") == "completed")
            for step in plan
            if isinstance(step, dict)
        )
        return [ProviderItem(self.turn_id, Todo(entries))]


def _tool_call(kind: str, item_id: str, item: ThreadItem, completed: bool) -> ToolCall:
    status = _STATUS.get(_str(item.get("status")))
    if status is None:
        status = ToolCallStatus.COMPLETED if completed else ToolCallStatus.RUNNING
    call = ToolCall(item_id, _TOOL_NAMES.get(kind, kind), status)
    match kind:
        case "commandExecution":
            call = _command(call, cast(protocol.CommandExecutionThreadItem, item))
        case "fileChange":
            call = _file_change(call, cast(protocol.FileChangeThreadItem, item))
        case "mcpToolCall" | "dynamicToolCall":  # the same keys, but for server vs namespace
            call = _tool(call, cast(protocol.McpToolCallThreadItem, item))
        case _:
            raw = cast(Mapping[str, JsonValue], item)
            fields = ("query", "action", "path")
            call = ToolCall(
                item_id, call.name, status, input={k: raw[k] for k in fields if k in raw}
            )
    if item.get("status") == "declined":
        return ToolCall(call.call_id, call.name, status, call.input, call.output, "declined")
    return call


def _command(call: ToolCall, item: protocol.CommandExecutionThreadItem) -> ToolCall:
    command: JsonValue = {"command": _str(item.get("command")), "cwd": _str(item.get("cwd"))}
    output = item.get("aggregatedOutput")
    exit_code = item.get("exitCode")
    error = ""
    if call.status is ToolCallStatus.FAILED:
        error = f"exit code {exit_code}" if isinstance(exit_code, int) else "failed"
    return ToolCall(call.call_id, call.name, call.status, command, output, error)


def _file_change(call: ToolCall, item: protocol.FileChangeThreadItem) -> ToolCall:
    changes = item.get("changes")
    listed = [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []
    patch: list[JsonValue] = [
        {
            "path": _str(c.get("path")),
            "kind": _str(kind.get("type")) if isinstance(kind := c.get("kind"), dict) else "",
            "diff": _str(c.get("diff")),
        }
        for c in listed
    ]
    error = "failed" if call.status is ToolCallStatus.FAILED else ""
    return ToolCall(call.call_id, call.name, call.status, {"changes": patch}, None, error)


def _tool(call: ToolCall, item: protocol.McpToolCallThreadItem) -> ToolCall:
    name = _str(item.get("tool")) or call.name
    server = _str(item.get("server")) or _str(item.get("namespace"))
    raw = cast(Mapping[str, JsonValue], item)  # a dynamic tool call says contentItems
    output = raw.get("result", raw.get("contentItems"))
    error = item.get("error")
    message = _str(error.get("message")) if isinstance(error, dict) else _str(error)
    if call.status is ToolCallStatus.FAILED and not message:
        message = "failed"
    return ToolCall(
        call.call_id,
        f"{server}.{name}" if server else name,
        call.status,
        item.get("arguments"),
        output,
        message,
    )


@dataclass(slots=True)
class UsageTally:
    """A turn's tokens from `thread/tokenUsage/updated`: its `total` is the thread's running
    sum and `last` the latest model call, so the turn used `total` now minus `total` before
    its first call (right also for a resumed thread, whose earlier total corral never saw)."""

    _before: tuple[int, int, int] | None = None
    _now: tuple[int, int, int] = (0, 0, 0)

    def update(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        total, last = _tokens(usage.get("total")), _tokens(usage.get("last"))
        if self._before is None:
            self._before = (total[0] - last[0], total[1] - last[1], total[2] - last[2])
        self._now = total

    def usage(self) -> Usage | None:
        before = self._before
        if before is None:
            return None
        now = self._now
        return Usage(
            input_tokens=max(now[0] - before[0], 0),
            output_tokens=max(now[1] - before[1], 0),
            cached_input_tokens=max(now[2] - before[2], 0),
        )


def _tokens(breakdown: object) -> tuple[int, int, int]:
    """(input, output, cached input) of a TokenUsageBreakdown."""
    if not isinstance(breakdown, dict):
        return (0, 0, 0)

    def count(key: str) -> int:
        value = breakdown.get(key)
        return value if isinstance(value, int) else 0

    return (count("inputTokens"), count("outputTokens"), count("cachedInputTokens"))


def history_items(thread: protocol.Thread | None) -> list[ProviderItem]:
    """A resumed thread's turns (`Thread.turns[].items`) as history items, oldest first: the
    user's messages (their text parts), then what the turn produced, as `ItemMapper` maps a
    completed item."""
    out: list[ProviderItem] = []
    turns = thread.get("turns") if thread is not None else None
    for turn in turns if isinstance(turns, list) else []:
        if not isinstance(turn, dict):
            continue
        mapper = ItemMapper()
        mapper.start_turn(_str(turn.get("id")))
        items = turn.get("items")
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "userMessage":
                out += _user_message(mapper.turn_id, cast(protocol.UserMessageThreadItem, item))
            else:
                out += mapper.completed(item)
    return [item._replace(from_history=True) for item in out]


def _user_message(turn_id: str, item: protocol.UserMessageThreadItem) -> list[ProviderItem]:
    content = item.get("content")
    parts = content if isinstance(content, list) else []
    texts = [_str(p.get("text")) for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    text = "\n".join(t for t in texts if t)
    if not text:
        return []
    item_id = _str(item.get("id"))
    return [ProviderItem(turn_id, UserMessage(text, message_id=item_id), item_id)]
