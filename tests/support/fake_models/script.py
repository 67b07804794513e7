"""What the fake model answers: markers in the prompt, read into a plan, API-neutral.

A marker is `[[name]]` or `[[name: argument]]` anywhere in the latest user message (the argument
runs to the first `]]`). The README beside this module lists them. Each model call of a turn is
answered from the markers of the turn's user message and the number of tool results the agent
has sent back since it: tool markers run one per model call, in order, and once every tool has
a result the model answers with its text. This module must not know any wire format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MARKER = re.compile(r"\[\[(\w+)(?::\s?(.*?))?\]\]", re.DOTALL)

DEFAULT_TEXT = "Hello from the fake model."
DEFAULT_TOOL_TEXT = "Done: the tool ran."
DEFAULT_THINKING = "Let me think about this step by step."
WRITE_CONTENT = "written by the fake model\n"
# A slow stream sends one word every SLOW_TICK_S for at most SLOW_DEFAULT_S (or [[slow: N]]
# seconds): long enough for any cancel test, bounded so a forgotten stream still ends.
SLOW_TICK_S = 0.1
SLOW_DEFAULT_S = 30.0


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call in neutral terms; each API module maps it onto the agent's own tools.

    kind: "shell" (run `command`), "write" (write `content` to `path`), "read" (read `path`),
    or "raw" (call the tool `name` with `args` verbatim).
    """

    kind: str
    command: str = ""
    path: str = ""
    content: str = ""
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Error:
    status: int
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    """One model call's answer: an optional thinking block, then a tool call or text."""

    text: str = DEFAULT_TEXT
    thinking: str | None = None
    tool: ToolCall | None = None
    slow_s: float = 0.0
    error: Error | None = None

    @property
    def kind(self) -> str:
        if self.error is not None:
            return f"error {self.error.status}"
        return "tool" if self.tool is not None else "text"


@dataclass(frozen=True, slots=True)
class Markers:
    reply: str | None = None
    thinking: str | None = None
    tools: tuple[ToolCall, ...] = ()
    slow_s: float = 0.0
    error: Error | None = None


def parse(prompt: str) -> Markers:
    reply: str | None = None
    thinking: str | None = None
    tools: list[ToolCall] = []
    slow_s = 0.0
    error: Error | None = None
    for m in MARKER.finditer(prompt):
        name, arg = m.group(1), (m.group(2) or "").strip()
        match name:
            case "reply":
                reply = arg
            case "think":
                thinking = arg or DEFAULT_THINKING
            case "shell":
                tools.append(ToolCall("shell", command=arg))
            case "write":
                path, _, content = arg.partition(" ")
                tools.append(ToolCall("write", path=path, content=content or WRITE_CONTENT))
            case "read":
                tools.append(ToolCall("read", path=arg))
            case "tool":
                tool_name, _, raw = arg.partition(" ")
                tools.append(ToolCall("raw", name=tool_name, args=json.loads(raw or "{}")))
            case "slow":
                slow_s = float(arg) if arg else SLOW_DEFAULT_S
            case "error":
                status, _, message = arg.partition(" ")
                error = Error(int(status or 500), message or "the fake model failed on purpose")
            case _:
                pass  # an unknown word in double brackets is text, not a marker
    return Markers(reply, thinking, tuple(tools), slow_s, error)


def plan(prompt: str, tool_results: int) -> Plan:
    """The answer to a model call whose turn began with `prompt`, after `tool_results` results."""
    markers = parse(prompt)
    if markers.error is not None:
        return Plan(error=markers.error)
    if tool_results < len(markers.tools):
        thinking = markers.thinking if tool_results == 0 else None
        return Plan(thinking=thinking, tool=markers.tools[tool_results])
    text = markers.reply or (DEFAULT_TOOL_TEXT if markers.tools else DEFAULT_TEXT)
    thinking = markers.thinking if not markers.tools else None
    return Plan(text=text, thinking=thinking, slow_s=markers.slow_s)


def chunks(text: str, slow_s: float) -> list[str]:
    """The text deltas of a reply: words (with their spaces), so clients see several deltas."""
    words = re.findall(r"\S+\s*|\s+", text) or [text]
    if slow_s <= 0:
        return words
    ticks = int(slow_s / SLOW_TICK_S)
    return [words[i % len(words)] if i < len(words) else "tick " for i in range(max(ticks, 1))]
