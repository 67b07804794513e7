"""Claude Code stream-json lines as timeline items, and a `result` line as a turn's end.

- `stream_event` deltas (`--include-partial-messages`) are the text and thinking as it streams:
  each becomes an AssistantMessage or Reasoning fragment whose provider_message_id is the API
  message id, so the coalescer joins the fragments of one block into one row.
- An `assistant` line carries one whole content block of a message. Its text or thinking was
  already streamed, so only what the deltas did not carry is reported (all of it when partial
  messages are off); a `tool_use` block is a pending ToolCall. A synthetic API error message
  is left to the turn's end, which carries it.
- A `user` line carries tool results: the ToolCall completes, or fails with the result's text.
  Its text blocks (an interrupt note) are not ours to store: corral stores the prompt itself.

Pure: no I/O, no sink.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import cast

from corral_server.domain.agent import AgentError, Usage
from corral_server.domain.timeline import (
    AssistantMessage,
    Reasoning,
    TimelineItem,
    ToolCall,
    ToolCallStatus,
)
from corral_server.providers.base import (
    ProviderEvent,
    ProviderItem,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
)
from corral_server.providers.claude_code_messages import (
    AssistantLine,
    ContentBlock,
    Line,
    ResultLine,
    StreamEventLine,
    UserLine,
)

AGENT_ERROR = "AGENT_ERROR"  # Claude Code ended the turn with an error result
MODEL_ERROR = "MODEL_ERROR"  # the model API answered with an error (result carries its status)
CANCELLED = "cancelled"

_TEXT_DELTAS = {"text_delta": "text", "thinking_delta": "thinking"}


@dataclass(slots=True)
class ItemMapper:
    turn_id: str = ""
    # Per API message id, the index of the block that streams now (content_block_start).
    _block: dict[str, int] = field(default_factory=dict)
    # Characters streamed per (message id, block index), until its `assistant` line.
    _streamed: dict[tuple[str, int], int] = field(default_factory=dict)
    # Blocks whose `assistant` line came: later deltas of them are not news.
    _done: set[tuple[str, int]] = field(default_factory=set)
    # Every tool call of the turn by id, in its latest state.
    _calls: dict[str, ToolCall] = field(default_factory=dict)

    def start_turn(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self._block, self._streamed, self._done, self._calls = {}, {}, set(), {}

    def map(self, line: Line) -> list[ProviderItem]:
        match line.get("type"):
            case "stream_event":
                return self._stream_event(cast(StreamEventLine, line))
            case "assistant":
                return self._assistant(cast(AssistantLine, line))
            case "user":
                return self._user(cast(UserLine, line))
            case _:
                return []

    def tool_call(self, call_id: str) -> ToolCall | None:
        return self._calls.get(call_id)

    def running(self, call_id: str) -> ProviderItem | None:
        """The call was allowed: it runs now (an unknown id reports nothing)."""
        call = self._calls.get(call_id)
        if call is None or call.status is not ToolCallStatus.PENDING:
            return None
        return self._call(replace(call, status=ToolCallStatus.RUNNING))

    # --- lines -----------------------------------------------------------------------------

    def _stream_event(self, line: StreamEventLine) -> list[ProviderItem]:
        event = line.get("event")
        if not isinstance(event, dict):
            return []
        message_id = str(line.get("api_message_id") or "")
        kind = event.get("type")
        if kind == "message_start":
            return []
        index = event.get("index")
        if not isinstance(index, int) or not message_id:
            return []
        if kind == "content_block_start":
            self._block[message_id] = index
            return []
        delta = event.get("delta")
        if kind != "content_block_delta" or not isinstance(delta, dict):
            return []
        key = str(_TEXT_DELTAS.get(str(delta.get("type")), ""))
        text = delta.get(key) if key else None
        if not isinstance(text, str) or not text or (message_id, index) in self._done:
            return []
        self._streamed[(message_id, index)] = self._streamed.get((message_id, index), 0) + len(text)
        return [self._text(key, text, message_id)]

    def _assistant(self, line: AssistantLine) -> list[ProviderItem]:
        message = line.get("message")
        if not isinstance(message, dict) or line.get("is_api_error_message"):
            return []
        message_id = str(message.get("id") or "")
        items: list[ProviderItem] = []
        for block in _blocks(message.get("content")):
            kind = block.get("type")
            if kind in ("text", "thinking"):
                items += self._whole_text(str(kind), block, message_id)
            elif kind == "tool_use":
                call_id = block.get("id")
                if isinstance(call_id, str) and call_id:
                    tool_input = block.get("input")
                    name = str(block.get("name") or "tool")
                    known = self._calls.get(call_id)
                    status = known.status if known is not None else ToolCallStatus.PENDING
                    items.append(self._call(ToolCall(call_id, name, status, tool_input)))
        return items

    def _whole_text(self, kind: str, block: ContentBlock, message_id: str) -> list[ProviderItem]:
        text = block.get(kind)
        if not isinstance(text, str):
            return []
        index = self._block.get(message_id, -1)
        key = (message_id, index)
        streamed = self._streamed.pop(key, 0) if index >= 0 else 0
        if index >= 0:
            self._done.add(key)
        rest = text[streamed:]
        return [self._text(kind, rest, message_id)] if rest else []

    def _user(self, line: UserLine) -> list[ProviderItem]:
        message = line.get("message")
        if not isinstance(message, dict):
            return []
        items: list[ProviderItem] = []
        for block in _blocks(message.get("content")):
            call_id = block.get("tool_use_id")
            if block.get("type") != "tool_result" or not isinstance(call_id, str):
                continue
            known = self._calls.get(call_id) or ToolCall(call_id, "tool", ToolCallStatus.PENDING)
            output = _result_text(block.get("content"))
            if block.get("is_error") is True:
                done = replace(known, status=ToolCallStatus.FAILED, error=output or "failed")
            else:
                done = replace(known, status=ToolCallStatus.COMPLETED, output=output)
            items.append(self._call(done))
        return items

    # --- items -----------------------------------------------------------------------------

    def _text(self, kind: str, text: str, message_id: str) -> ProviderItem:
        item: TimelineItem = (
            AssistantMessage(text, message_id) if kind == "text" else Reasoning(text)
        )
        return ProviderItem(self.turn_id, item, message_id)

    def _call(self, call: ToolCall) -> ProviderItem:
        self._calls[call.call_id] = call
        return ProviderItem(self.turn_id, call)


def _blocks(content: object) -> list[ContentBlock]:
    if isinstance(content, list):
        return [cast(ContentBlock, b) for b in content if isinstance(b, dict)]
    return []


def _result_text(content: object) -> str:
    """A tool result's text: a string, or the text blocks of a list."""
    if isinstance(content, str):
        return content
    texts = [b.get("text") for b in _blocks(content) if b.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))


# --- the end of a turn ----------------------------------------------------------------------


def terminal(turn_id: str, result: ResultLine, canceling: bool) -> ProviderEvent:
    """The turn's end from its `result` line. An interrupt that Claude Code confirmed ends the
    turn canceled, whatever the result says (it reports `error_during_execution`)."""
    if canceling:
        return ProviderTurnCanceled(turn_id, CANCELLED)
    subtype = result.get("subtype")
    if subtype == "success" and result.get("is_error") is not True:
        return ProviderTurnCompleted(turn_id, usage(result))
    return ProviderTurnFailed(turn_id, error_of(result))


def error_of(result: ResultLine) -> AgentError:
    status = result.get("api_error_status")
    text = result.get("result")
    errors = result.get("errors")
    if not isinstance(text, str) or not text:
        listed = [str(e) for e in errors] if isinstance(errors, list) else []
        text = "; ".join(listed) or f"claude ended the turn with {result.get('subtype')!r}"
    if isinstance(status, int):
        return AgentError(text, MODEL_ERROR)
    return AgentError(text, AGENT_ERROR)


def usage(result: ResultLine) -> Usage | None:
    """The turn's tokens (input counts cached and cache-writing input too, as the other
    providers do) and its cost (this turn's, not the session's running total)."""
    raw = result.get("usage")
    if not isinstance(raw, dict):
        return None

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) else 0

    cached = count("cache_read_input_tokens")
    cost = 0.0
    per_model = result.get("model_usage_since_last_result")
    if isinstance(per_model, dict):
        for model in per_model.values():
            spent = model.get("costUSD") if isinstance(model, dict) else None
            cost += spent if isinstance(spent, int | float) else 0.0
    return Usage(
        input_tokens=count("input_tokens") + count("cache_creation_input_tokens") + cached,
        output_tokens=count("output_tokens"),
        cached_input_tokens=cached,
        cost_usd=cost,
    )
