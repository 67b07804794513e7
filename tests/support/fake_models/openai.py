"""OpenAI Responses, as Codex calls it: `POST /v1/responses` with `stream: true`, answered as
SSE. Codex (codex-api `sse/responses.rs`) builds its items from `response.output_item.done`,
streams `response.output_text.delta` and `response.reasoning_summary_text.delta`, and needs a
`response.completed` (with `id` and `usage`) before the stream ends, else the turn fails with
"stream closed before response.completed"."""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
from typing import Any

from tests.support.fake_models import script
from tests.support.fake_models.http import Request, Response

_ids = itertools.count(1)


def turn_of(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The turn's user prompt and the tool outputs sent back since it (newest last)."""
    results: list[str] = []
    items = body.get("input", [])
    if isinstance(items, str):
        return items, []
    for item in reversed(items):
        kind = item.get("type", "message")
        if kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            results.append(output if isinstance(output, str) else json.dumps(output))
        elif kind == "message" and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content, results[::-1]
            texts = [c.get("text", "") for c in content if c.get("type") == "input_text"]
            if texts and not texts[-1].lstrip().startswith("<"):  # not <environment_context>
                return texts[-1], results[::-1]
    return "", results[::-1]


def tool_names(body: dict[str, Any]) -> dict[str, str]:
    """Offered tool name -> its type ("function", or "custom" for freeform tools)."""
    return {
        t.get("name", ""): t.get("type", "") for t in body.get("tools", []) if isinstance(t, dict)
    }


def function_call(call: script.ToolCall, offered: dict[str, str]) -> dict[str, Any]:
    """The output item that calls the agent's tool for a neutral tool call."""
    call_id = f"call_fake_{next(_ids)}"
    item_id = f"fc_fake_{next(_ids)}"
    name, args = _tool(call, offered)
    if isinstance(args, str) and offered.get(name) != "custom":
        args = {"input": args}  # apply_patch offered as a function rather than a freeform tool
    if isinstance(args, str):
        return {
            "type": "custom_tool_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "input": args,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def _tool(call: script.ToolCall, offered: dict[str, str]) -> tuple[str, Any]:
    match call.kind:
        case "shell":
            if "exec_command" in offered:
                return "exec_command", {"cmd": call.command}
            if "shell_command" in offered:
                return "shell_command", {"command": call.command}
            return "shell", {"command": ["bash", "-lc", call.command]}
        case "write" if "apply_patch" in offered:
            lines = "".join(f"+{line}\n" for line in call.content.splitlines())
            return (
                "apply_patch",
                f"*** Begin Patch\n*** Add File: {call.path}\n{lines}*** End Patch\n",
            )
        case "write":  # no apply_patch tool offered (Codex's fallback model metadata): a shell
            command = f"printf %s {shlex.quote(call.content)} > {shlex.quote(call.path)}"
            return _tool(script.ToolCall("shell", command=command), offered)
        case "read":
            return _tool(script.ToolCall("shell", command=f"cat {call.path}"), offered)
        case _:
            return call.name, call.args


def error_body(error: script.Error) -> dict[str, Any]:
    code = {429: "rate_limit_exceeded", 400: "invalid_request"}.get(error.status, "server_error")
    return {"error": {"message": error.message, "type": code, "code": code, "param": None}}


async def responses(request: Request, response: Response, plan: script.Plan) -> None:
    body = request.json()
    if plan.error is not None:
        await response.json(plan.error.status, error_body(plan.error))
        return
    response_id = f"resp_fake_{next(_ids)}"
    model = body.get("model", "gpt-fake")
    await response.sse()
    seq = itertools.count()

    async def emit(kind: str, **fields: Any) -> None:
        await response.event({"type": kind, "sequence_number": next(seq), **fields}, kind)

    await emit(
        "response.created",
        response={"id": response_id, "model": model, "status": "in_progress", "output": []},
    )
    index = 0
    if plan.thinking:
        await _reasoning(emit, index, plan.thinking)
        index += 1
    if plan.tool is not None:
        item = function_call(plan.tool, tool_names(body))
        await emit(
            "response.output_item.added", output_index=index, item={**item, "status": "in_progress"}
        )
        if item["type"] == "function_call":
            await emit(
                "response.function_call_arguments.delta",
                output_index=index,
                item_id=item["id"],
                delta=item["arguments"],
            )
            await emit(
                "response.function_call_arguments.done",
                output_index=index,
                item_id=item["id"],
                arguments=item["arguments"],
            )
        await emit("response.output_item.done", output_index=index, item=item)
    else:
        await _message(emit, index, plan.text, plan.slow_s)
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2 if plan.thinking else 0},
        "total_tokens": 15,
    }
    await emit(
        "response.completed",
        response={"id": response_id, "model": model, "status": "completed", "usage": usage},
    )


async def _reasoning(emit: Any, index: int, thinking: str) -> None:
    item_id = f"rs_fake_{next(_ids)}"
    await emit(
        "response.output_item.added",
        output_index=index,
        item={"type": "reasoning", "id": item_id, "summary": []},
    )
    await emit(
        "response.reasoning_summary_part.added",
        output_index=index,
        item_id=item_id,
        summary_index=0,
        part={"type": "summary_text", "text": ""},
    )
    for chunk in script.chunks(thinking, 0):
        await emit(
            "response.reasoning_summary_text.delta",
            output_index=index,
            item_id=item_id,
            summary_index=0,
            delta=chunk,
        )
    done = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": thinking}],
    }
    await emit("response.output_item.done", output_index=index, item=done)


async def _message(emit: Any, index: int, text: str, slow_s: float) -> None:
    item_id = f"msg_fake_{next(_ids)}"
    empty = {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    await emit("response.output_item.added", output_index=index, item=empty)
    await emit(
        "response.content_part.added",
        output_index=index,
        item_id=item_id,
        content_index=0,
        part={"type": "output_text", "text": "", "annotations": []},
    )
    sent = []
    for chunk in script.chunks(text, slow_s):
        if slow_s > 0:
            await asyncio.sleep(script.SLOW_TICK_S)
        sent.append(chunk)
        await emit(
            "response.output_text.delta",
            output_index=index,
            item_id=item_id,
            content_index=0,
            delta=chunk,
        )
    full = "".join(sent)
    await emit(
        "response.output_text.done", output_index=index, item_id=item_id, content_index=0, text=full
    )
    done = {
        **empty,
        "status": "completed",
        "content": [{"type": "output_text", "text": full, "annotations": []}],
    }
    await emit("response.output_item.done", output_index=index, item=done)


async def models(request: Request, response: Response) -> None:
    await response.json(
        200,
        {
            "object": "list",
            "data": [{"id": "gpt-fake", "object": "model", "owned_by": "fake"}],
            "models": [],
        },
    )
