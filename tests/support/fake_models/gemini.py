"""Gemini API, as gemini-cli calls it through `@google/genai`: `POST
/v1beta/models/MODEL:streamGenerateContent?alt=sse` (each event a GenerateContentResponse, the
last with `finishReason` and `usageMetadata`), `:generateContent` (the same, whole), and
`:countTokens`."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tests.support.fake_models import script
from tests.support.fake_models.http import Request, Response

_ids = itertools.count(1)


def turn_of(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The turn's user prompt and the function responses sent back since it (newest last)."""
    results: list[str] = []
    for content in reversed(body.get("contents", [])):
        if content.get("role", "user") != "user":
            continue
        parts = content.get("parts", [])
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if responses:
            results += [str(r.get("response", "")) for r in reversed(responses)]
            continue
        texts = [p["text"] for p in parts if "text" in p and not p.get("thought")]
        if texts:
            return texts[-1], results[::-1]
    return "", results[::-1]


def declared(body: dict[str, Any]) -> dict[str, set[str]]:
    """Tool name -> its parameter names, from the request's functionDeclarations."""
    tools: dict[str, set[str]] = {}
    for tool in body.get("tools", []):
        for decl in tool.get("functionDeclarations", []):
            schema = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
            tools[decl.get("name", "")] = set(schema.get("properties", {}))
    return tools


def function_call(call: script.ToolCall, tools: dict[str, set[str]]) -> dict[str, Any]:
    match call.kind:
        case "shell":
            name, args = "run_shell_command", {"command": call.command}
        case "write":
            name, args = "write_file", {"file_path": call.path, "content": call.content}
        case "read":
            key = (
                "absolute_path" if "absolute_path" in tools.get("read_file", set()) else "file_path"
            )
            name, args = "read_file", {key: call.path}
        case _:
            name, args = call.name, call.args
    return {"functionCall": {"id": f"fake-call-{next(_ids)}", "name": name, "args": args}}


def error_body(error: script.Error) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(
        error.status, "INTERNAL"
    )
    return {"error": {"code": error.status, "message": error.message, "status": status}}


def _chunk(
    parts: list[dict[str, Any]], model: str, finish: bool, response_id: str
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    out: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": model,
        "responseId": response_id,
    }
    if finish:
        candidate["finishReason"] = "STOP"
        out["usageMetadata"] = {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "totalTokenCount": 15,
        }
    return out


def parts_of(plan: script.Plan, body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The answer as the parts of successive stream chunks."""
    chunks: list[list[dict[str, Any]]] = []
    if plan.thinking:
        chunks.append([{"text": plan.thinking, "thought": True}])
    if plan.tool is not None:
        chunks.append([function_call(plan.tool, declared(body))])
    else:
        chunks += [[{"text": c}] for c in script.chunks(plan.text, plan.slow_s)]
    return chunks


async def generate(
    request: Request, response: Response, plan: script.Plan, model: str, stream: bool
) -> None:
    body = request.json()
    if plan.error is not None:
        await response.json(plan.error.status, error_body(plan.error))
        return
    response_id = f"fake-response-{next(_ids)}"
    chunks = parts_of(plan, body)
    if not stream:
        parts = [p for chunk in chunks for p in chunk]
        await response.json(200, _chunk(_merged(parts), model, True, response_id))
        return
    await response.sse()
    for i, parts in enumerate(chunks):
        if plan.slow_s > 0:
            await asyncio.sleep(script.SLOW_TICK_S)
        await response.event(_chunk(parts, model, i == len(chunks) - 1, response_id))


def _merged(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if (
            out
            and "text" in part
            and "text" in out[-1]
            and part.get("thought") == out[-1].get("thought")
        ):
            out[-1] = {**out[-1], "text": out[-1]["text"] + part["text"]}
        else:
            out.append(part)
    return out


async def count_tokens(request: Request, response: Response) -> None:
    await response.json(200, {"totalTokens": max(1, len(request.body) // 4)})
