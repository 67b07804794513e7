"""An agent's timeline as Markdown, for people (ExportAgent's MARKDOWN format): a heading per
row with who spoke and when, the text as it is, tool calls with their input and output as
JSON code blocks. Unlike the activity digest nothing is cut; unlike JSON Lines it is not meant
to be read back.

Pure: domain rows in, text out (the rpc edge reads the rows and sends the text).
"""

from __future__ import annotations

import datetime
import json
from typing import assert_never

from corral_server.domain import timeline as dt
from corral_server.domain.agent import Agent


def when(ms: int) -> str:
    at = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def header(agent: Agent, rows: int) -> str:
    model = f", model {agent.model}" if agent.model else ""
    lines = [
        f"# {agent.title or 'Agent ' + agent.id}",
        "",
        f"- agent: `{agent.id}`",
        f"- provider: {agent.provider}{model}",
        f"- cwd: `{agent.cwd}`",
        f"- created: {when(agent.created_at_ms)}",
        f"- rows: {rows} (epoch `{agent.epoch}`)",
    ]
    lines += [f"- label: `{k}={v}`" for k, v in sorted(agent.labels.items())]
    return "\n".join(lines) + "\n"


def row(r: dt.TimelineRow) -> str:
    """One row: a level-2 heading, a blank line, its body, a blank line."""
    title, body = _item(r.item)
    turn = f" · turn `{r.turn_id}`" if r.turn_id else ""
    return f"\n## {r.seq}. {title} · {when(r.timestamp_ms)}{turn}\n\n{body.rstrip()}\n"


def _fenced(text: str, lang: str = "") -> str:
    fence = "```"
    while fence in text:  # a fence longer than any run of backticks inside
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


def _json(value: dt.JsonValue) -> str:
    return _fenced(json.dumps(value, ensure_ascii=False, indent=2), "json")


def _item(item: dt.TimelineItem) -> tuple[str, str]:
    match item:
        case dt.UserMessage(text=text):
            return "User", text
        case dt.AssistantMessage(text=text):
            return "Assistant", text
        case dt.Reasoning(text=text):
            return "Reasoning", "\n".join(f"> {line}" for line in text.splitlines()) or ">"
        case dt.ToolCall():
            return f"Tool `{item.name}` ({item.status.value})", _tool(item)
        case dt.Todo(entries=entries):
            return "Todo", "\n".join(f"- [{'x' if e.completed else ' '}] {e.text}" for e in entries)
        case dt.ErrorItem(message=message, code=code):
            return f"Error{f' `{code}`' if code else ''}", message
        case dt.Compaction(summary=summary):
            return "Compaction", summary
        case dt.SubagentNotice(run_id=run_id, child_agent_id=child, text=text):
            return f"Sub-agent `{child}` (run `{run_id}`)", text
        case _:
            assert_never(item)


def _tool(call: dt.ToolCall) -> str:
    parts = []
    if call.input is not None:
        parts.append("Input:\n\n" + _json(call.input))
    if call.output is not None:
        parts.append("Output:\n\n" + _json(call.output))
    if call.error:
        parts.append("Error: " + call.error)
    return "\n\n".join(parts) or "(no input or output)"
