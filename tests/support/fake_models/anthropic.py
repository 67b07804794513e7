"""Anthropic Messages, as Claude Code and claude-agent-acp call it: `POST /v1/messages` (SSE
when `stream` is true, else one JSON message), `POST /v1/messages/count_tokens`, `GET
/v1/models`. The event sequence follows the Messages streaming reference: message_start,
then per block content_block_start / *_delta / content_block_stop, then message_delta (stop
reason, usage) and message_stop."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from tests.support.fake_models import script
from tests.support.fake_models.http import Request, Response

_ids = itertools.count(1)


# Claude Code's tools for the neutral tool kinds (their input schemas as Claude Code 2.1 sends
# them in `tools`).
def tool_use(call: script.ToolCall) -> tuple[str, dict[str, Any]]:
    match call.kind:
        case "shell":
            return "Bash", {"command": call.command, "description": "Run a command"}
        case "write":
            return "Write", {"file_path": call.path, "content": call.content}
        case "read":
            return "Read", {"file_path": call.path}
        case _:
            return call.name, call.args


def turn_of(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The turn's user prompt and the tool results sent back since it (newest last)."""
    results: list[str] = []
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content, results[::-1]
        blocks = [b for b in content if isinstance(b, dict)]
        tool_results = [b for b in blocks if b.get("type") == "tool_result"]
        if tool_results:
            results += [_result_text(b) for b in reversed(tool_results)]
            continue
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        if texts:
            return texts[-1], results[::-1]
    return "", results[::-1]


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    return str(content or "")


def error_body(error: script.Error) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def _usage(output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": 10,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def blocks_of(plan: script.Plan) -> list[dict[str, Any]]:
    """The full content blocks of the answer (for a non-streaming reply)."""
    blocks: list[dict[str, Any]] = []
    if plan.thinking:
        blocks.append({"type": "thinking", "thinking": plan.thinking, "signature": "fake-sig"})
    if plan.tool is not None:
        name, args = tool_use(plan.tool)
        blocks.append(
            {"type": "tool_use", "id": f"toolu_fake_{next(_ids)}", "name": name, "input": args}
        )
    else:
        blocks.append({"type": "text", "text": plan.text})
    return blocks


async def messages(request: Request, response: Response, plan: script.Plan) -> None:
    body = request.json()
    model = body.get("model", "claude-fake")
    if plan.error is not None:
        await response.json(plan.error.status, error_body(plan.error), {"x-should-retry": "false"})
        return
    blocks = blocks_of(plan)
    stop_reason = "tool_use" if plan.tool is not None else "end_turn"
    message_id = f"msg_fake_{next(_ids)}"
    if not body.get("stream"):
        await response.json(
            200,
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": _usage(5),
            },
        )
        return
    await response.sse()
    start = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(1),
    }
    await response.event({"type": "message_start", "message": start}, "message_start")
    output_tokens = 1
    for index, block in enumerate(blocks):
        output_tokens += await _stream_block(response, index, block, plan.slow_s)
    await response.event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        "message_delta",
    )
    await response.event({"type": "message_stop"}, "message_stop")


async def _stream_block(
    response: Response, index: int, block: dict[str, Any], slow_s: float
) -> int:
    """Streams one content block; returns the number of deltas (the fake's token count)."""
    kind = block["type"]
    empty: dict[str, Any]
    deltas: list[dict[str, Any]]
    if kind == "text":
        empty = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": c} for c in script.chunks(block["text"], slow_s)]
    elif kind == "thinking":
        empty = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": c} for c in script.chunks(block["thinking"], 0)
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        empty = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        raw = json.dumps(block["input"])
        deltas = [
            {"type": "input_json_delta", "partial_json": raw[i : i + 20]}
            for i in range(0, len(raw), 20)
        ]
    await response.event(
        {"type": "content_block_start", "index": index, "content_block": empty},
        "content_block_start",
    )
    for delta in deltas:
        if slow_s > 0:
            await asyncio.sleep(script.SLOW_TICK_S)
        await response.event(
            {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
        )
    await response.event({"type": "content_block_stop", "index": index}, "content_block_stop")
    return len(deltas)


async def count_tokens(request: Request, response: Response) -> None:
    await response.json(200, {"input_tokens": max(1, len(request.body) // 4)})


async def models(request: Request, response: Response) -> None:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
        for m in ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5")
    ]
    await response.json(
        200, {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
    )
