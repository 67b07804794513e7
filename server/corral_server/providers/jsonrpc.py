"""JSON-RPC 2.0 over one agent's line connection: ACP agents (with the "jsonrpc" member) and
`codex app-server` (without it).

This module owns the message shapes: our requests with their ids, notifications both ways,
the responses that settle our requests, and the answers to the agent's requests (a result, or
an error with a code). It knows nothing of sessions or turns: the agent's requests and
notifications go to the handlers it was given.

Requests flow both ways and both sides count their ids from small numbers (codex's first
approval request has id 0, ours 1), so a line is a request or notification from the agent when
it has a "method", and a response to us otherwise: never judged by its id.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeAlias

from corral_server.domain.timeline import JsonObject, JsonValue
from corral_server.providers.connection import (
    ConnectionLost,
    LineConnection,
    RequestFailed,
)

logger = logging.getLogger(__name__)

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

Params: TypeAlias = Mapping[str, JsonValue]  # what the agent sent
Out: TypeAlias = Mapping[str, object]  # what we send: anything `json.dumps` writes
# (the agent's request id, method, params) -> the result; raise RpcError to answer an error.
# Called synchronously, in line order with the notifications, so a handler can do its
# bookkeeping before the next line is read; the awaitable it returns runs as a task.
RequestHandler: TypeAlias = Callable[[JsonValue, str, Params], Awaitable[object]]
NotificationHandler: TypeAlias = Callable[[str, Params], None]


class RpcError(RequestFailed):
    """A JSON-RPC error response to one of our requests (or one we answer the agent with)."""

    def __init__(self, message: str, code: int = INTERNAL_ERROR, data: JsonValue = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class JsonRpc:
    """One JSON-RPC peer over `line`, which it starts reading."""

    def __init__(
        self,
        line: LineConnection,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[ConnectionLost], None],
        *,
        version_member: bool,
    ) -> None:
        self._line = line
        self._on_request = on_request
        self._on_notification = on_notification
        # ACP writes "jsonrpc": "2.0" in every message; codex leaves it out.
        self._version: JsonObject = {"jsonrpc": "2.0"} if version_member else {}
        self._ids = itertools.count(1)
        line.start(self._read, on_lost)

    async def request(self, method: str, params: Out, timeout_s: float | None = None) -> JsonValue:
        """Send a request and wait for its result (`RpcError` for an error response); see
        `LineConnection.call` for the deadline and a lost connection."""
        rid = next(self._ids)
        message = {**self._version, "id": rid, "method": method, "params": dict(params)}
        return await self._line.call(rid, message, method, timeout_s)

    async def notify(self, method: str, params: Out | None = None) -> None:
        message: dict[str, object] = {**self._version, "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self._line.send(message)

    def _read(self, message: JsonObject) -> None:
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str):  # from the agent: a request when it has an id, else a note
            if "id" in message:
                rid = message["id"]
                try:
                    result = self._on_request(rid, method, params)
                except Exception as exc:
                    result = _raising(exc)
                self._line.start_handler(self._answer(rid, method, result))
            else:
                self._on_notification(method, params)
            return
        error = message.get("error")
        if error is None:
            self._line.settle(message.get("id"), message.get("result"))
            return
        error = error if isinstance(error, dict) else {"message": str(error)}
        code = error.get("code")
        failure = RpcError(
            str(error.get("message", "error")),
            code if isinstance(code, int) else INTERNAL_ERROR,
            error.get("data"),
        )
        self._line.settle(message.get("id"), error=failure)

    async def _answer(self, rid: JsonValue, method: str, result: Awaitable[object]) -> None:
        reply: dict[str, object] = {**self._version, "id": rid}
        try:
            reply["result"] = await result
        except RpcError as exc:
            reply["error"] = {"code": exc.code, "message": str(exc)}
        except Exception as exc:
            logger.exception("%s %d: request %s failed", self._line.who, self._line.pid, method)
            reply["error"] = {"code": INTERNAL_ERROR, "message": str(exc)}
        with contextlib.suppress(ConnectionLost):
            await self._line.send(reply)


async def _raising(error: Exception) -> object:
    raise error
