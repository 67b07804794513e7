"""A tiny ACP agent built on the official Python SDK (`agent-client-protocol`), for the edge
cases no real agent produces on demand; the same modes as acp_stub.py (which is hand-framed, to
send what the SDK never would: a request id shared by both directions). Run as
`python acp_sdk_agent.py MODE`:

- `echo`: streams the prompt text back as two chunks, then ends with end_turn;
- `crash`: exits with status 3 mid-turn (after one chunk);
- `huge`: writes one line over the provider's line limit;
- `garbage`: writes a non-JSON line and a JSON array first, then answers like `echo`;
- `ask`: asks for a permission (options allow / reject) and replies with the outcome it got;
- `hang`: never answers the prompt, ignores SIGTERM and does not exit when stdin closes;
- `old`: answers initialize with protocol version 0;
- `files`: the prompt is JSON `{"ops": [...], "parallel": bool}`, each op `{"read": PATH,
  "line": N, "limit": N}` or `{"write": PATH, "content": TEXT}` asked of the client
  (fs/read_text_file, fs/write_text_file); the reply is the JSON list of outcomes, each
  `{"content": TEXT}`, `{"written": true}` or `{"error": MESSAGE}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any, cast

import acp
import acp.interfaces
from acp.schema import PermissionOption, ToolCallUpdate

MODE = sys.argv[1]


class StubAgent:
    """An `acp.Agent`: only what corral's adapter calls."""

    def __init__(self) -> None:
        self._conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> acp.InitializeResponse:
        return acp.InitializeResponse(protocol_version=0 if MODE == "old" else 1)

    async def new_session(self, cwd: str, **kwargs: Any) -> acp.NewSessionResponse:
        return acp.NewSessionResponse(session_id="s1")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> acp.PromptResponse:
        text = prompt[0].text
        if MODE == "hang":
            await asyncio.Event().wait()
        if MODE == "files":
            await self._say(session_id, json.dumps(await self._files(session_id, text)))
            return acp.PromptResponse(stop_reason="end_turn")
        if MODE == "huge":
            raw(b"x" * (17 * 1024 * 1024))
            await asyncio.Event().wait()
        if MODE == "garbage":
            raw(b"not json at all")
            raw(b"[1, 2]")
        if MODE == "ask":
            options = [
                PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ]
            tool = ToolCallUpdate(tool_call_id="c1", title="touch", kind="execute")
            answer = await self._conn.request_permission(
                session_id=session_id, tool_call=tool, options=options
            )
            text = json.dumps(answer.outcome.model_dump(by_alias=True, exclude_none=True))
        await self._say(session_id, text[: len(text) // 2])
        if MODE == "crash":
            await asyncio.sleep(0.05)  # let the chunk go out first
            os._exit(3)
        await self._say(session_id, text[len(text) // 2 :])
        return acp.PromptResponse(stop_reason="end_turn")

    async def _files(self, session_id: str, text: str) -> list[dict[str, Any]]:
        request = json.loads(text)
        ops = [self._file_op(session_id, op) for op in request["ops"]]
        if request.get("parallel"):
            return list(await asyncio.gather(*ops))
        return [await op for op in ops]

    async def _file_op(self, session_id: str, op: dict[str, Any]) -> dict[str, Any]:
        try:
            if "write" in op:
                await self._conn.write_text_file(
                    session_id=session_id, path=op["write"], content=op["content"]
                )
                return {"written": True}
            read = await self._conn.read_text_file(
                session_id=session_id, path=op["read"], line=op.get("line"), limit=op.get("limit")
            )
            return {"content": read.content}
        except acp.RequestError as exc:
            return {"error": str(exc), "code": exc.code}

    async def _say(self, session_id: str, text: str) -> None:
        await self._conn.session_update(
            session_id=session_id, update=acp.update_agent_message_text(text)
        )


def raw(line: bytes) -> None:
    """A line the SDK would never write, straight onto stdout (whole: the SDK's transport made
    the pipe non-blocking)."""
    fd = sys.stdout.fileno()
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, True)
    try:
        data = memoryview(line + b"\n")
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.set_blocking(fd, blocking)


async def main() -> None:
    if MODE == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The SDK answers method-not-found for what StubAgent leaves out of its Agent protocol.
    await acp.run_agent(cast(acp.interfaces.Agent, StubAgent()))
    if MODE == "hang":  # stdin closed: still not exiting
        await asyncio.Event().wait()


asyncio.run(main())
