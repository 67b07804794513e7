"""Minimal drivers of the real agents' protocols for the smoke tests: just enough framing to run a
turn, answer the agent's requests and collect what it streamed. They are not the adapters (those
live in the server and are far stricter); they show the wire the adapters must speak.

- AcpDriver: ACP (JSON-RPC 2.0 lines). Requests flow both ways with independent id counters, so
  a message is a response to us only when it has an id and no method.
- CodexDriver: `codex app-server` (JSON-RPC lines without the "jsonrpc" member).
- Claude Code stream-json needs no driver beyond Child: user lines in, typed lines out.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.agents.child import Child, ChildError, Message

# Chooses the ACP permission option kind to answer with ("allow_once", "reject_once", ...).
PermissionPolicy = Callable[[Message], str]


def allow_once(_request: Message) -> str:
    return "allow_once"


def reject_once(_request: Message) -> str:
    return "reject_once"


class AcpDriver:
    def __init__(self, child: Child, cwd: Path, permission: PermissionPolicy = allow_once) -> None:
        self.child = child
        self.cwd = cwd
        self.permission = permission
        self.ids = itertools.count(1)
        self.updates: list[dict[str, Any]] = []  # every session/update's `update`, in order
        self.agent_requests: list[Message] = []
        self._updated = asyncio.Condition()

    async def request(self, method: str, params: dict[str, Any], timeout_s: float = 20) -> Any:
        rid = next(self.ids)
        await self.child.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        while True:
            message = await self.child.next(lambda m: True, max(deadline - time.monotonic(), 0))
            if "method" in message:
                await self._on_agent_message(message)
            elif message.get("id") == rid:
                if "error" in message:
                    raise ChildError(f"{method} failed: {message['error']}")
                return message.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.child.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _on_agent_message(self, message: Message) -> None:
        method, params = message["method"], message.get("params", {})
        if method == "session/update":
            self.updates.append(params["update"])
            async with self._updated:
                self._updated.notify_all()
            return
        if "id" not in message:
            return
        self.agent_requests.append(message)
        result: Any
        match method:
            case "session/request_permission":
                kind = self.permission(message)
                option = next(o for o in params["options"] if o["kind"] == kind)
                result = {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
            case "fs/read_text_file":
                # gemini-cli reads a file before it writes it: a missing file is empty content.
                path = self._inside(params["path"])
                result = {"content": path.read_text() if path.exists() else ""}
            case "fs/write_text_file":
                self._inside(params["path"]).write_text(params["content"])
                result = None
            case _:
                await self.child.send(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "error": {"code": -32601, "message": f"unsupported: {method}"},
                    }
                )
                return
        await self.child.send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def _inside(self, raw: str) -> Path:
        path = Path(raw).resolve()
        if not path.is_relative_to(self.cwd.resolve()):
            raise ChildError(f"agent touched a file outside its cwd: {raw}")
        return path

    async def wait_update(self, kind: str, timeout_s: float = 15) -> None:
        """Waits until an update of `kind` arrived (while a request, e.g. a prompt, reads)."""
        async with self._updated:
            await asyncio.wait_for(
                self._updated.wait_for(
                    lambda: any(u["sessionUpdate"] == kind for u in self.updates)
                ),
                timeout_s,
            )

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(
            u["content"].get("text", "") for u in self.updates if u["sessionUpdate"] == kind
        )

    async def start_session(self) -> str:
        await self.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {
                    "fs": {"readTextFile": True, "writeTextFile": True},
                    "terminal": False,
                },
            },
        )
        result = await self.request("session/new", {"cwd": str(self.cwd), "mcpServers": []})
        return str(result["sessionId"])

    async def prompt(self, session_id: str, text: str, timeout_s: float = 20) -> Any:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return await self.request("session/prompt", params, timeout_s)


class CodexDriver:
    """Answers command approvals with `decision` and collects notifications in order."""

    def __init__(self, child: Child, decision: str = "accept") -> None:
        self.child = child
        self.decision = decision
        self.ids = itertools.count(1)
        self.notifications: list[Message] = []
        self.approvals: list[Message] = []

    async def request(self, method: str, params: dict[str, Any], timeout_s: float = 20) -> Any:
        rid = next(self.ids)
        await self.child.send({"id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        while True:
            message = await self.child.next(lambda m: True, max(deadline - time.monotonic(), 0))
            if "method" in message:
                await self._on_server_message(message)
            elif message.get("id") == rid:
                if "error" in message:
                    raise ChildError(f"{method} failed: {message['error']}")
                return message.get("result")

    async def _on_server_message(self, message: Message) -> None:
        if "id" not in message:
            self.notifications.append(message)
            return
        if message["method"].endswith("/requestApproval"):
            self.approvals.append(message)
            await self.child.send({"id": message["id"], "result": {"decision": self.decision}})
        else:
            await self.child.send(
                {"id": message["id"], "error": {"code": -32601, "message": "unsupported"}}
            )

    async def until(self, method: str, timeout_s: float = 20) -> Message:
        """Reads (and answers) server messages until a notification named `method`."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = await self.child.next(lambda m: True, max(deadline - time.monotonic(), 0))
            if "method" not in message:
                continue
            await self._on_server_message(message)
            if message["method"] == method and "id" not in message:
                return message

    async def start_thread(self, cwd: Path) -> str:
        await self.request("initialize", {"clientInfo": {"name": "corral-smoke", "version": "0"}})
        await self.child.send({"method": "initialized"})
        params = {"cwd": str(cwd), "approvalPolicy": "untrusted", "sandbox": "danger-full-access"}
        result = await self.request("thread/start", params)
        return str(result["thread"]["id"])

    async def start_turn(self, thread_id: str, text: str) -> str:
        params = {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
        result = await self.request("turn/start", params)
        return str(result["turn"]["id"])

    def of(self, method: str) -> list[dict[str, Any]]:
        return [n["params"] for n in self.notifications if n["method"] == method]
