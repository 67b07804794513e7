"""One ACP agent process and its JSON-RPC 2.0 line framing (protocol version 1).

This module owns the framing over one agent process (its spawning, stderr tail and stopping
live in child.py), the one stdout reader, and the table of our requests that wait for a
response. It knows nothing of sessions or turns: requests and notifications from the agent go
to the handlers it was given.

Requests flow both ways with independent id counters, so a line is a request or notification
from the agent when it has a "method", and a response to us otherwise, never judged by its id.
It must never hang on a dead process: when stdout ends (or a line breaks the framing) every
waiting request fails with `AcpConnectionLost`, carrying the tail of stderr.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from corral_server.providers.child import (
    MAX_LINE_BYTES,
    AgentProcess,
    LineTooLong,
    PendingRequests,
)

logger = logging.getLogger(__name__)

# After stdin closes, how long an agent may take to exit on its own.
EOF_GRACE_S = 0.3

Json: TypeAlias = Any
RequestHandler: TypeAlias = Callable[[str, Mapping[str, Json]], Awaitable[Json]]
NotificationHandler: TypeAlias = Callable[[str, Mapping[str, Json]], None]

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603


class AcpError(Exception):
    """A JSON-RPC error response to one of our requests (or one we answer the agent with)."""

    def __init__(self, message: str, code: int = INTERNAL_ERROR, data: Json = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class AcpConnectionLost(Exception):
    """The agent process ended, or broke the framing; no response will come."""


class AcpConnection:
    """Invariant: once `_lost` is set, `_pending` is empty and stays empty."""

    def __init__(
        self,
        process: AgentProcess,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[str], None],
    ) -> None:
        self._process = process
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: PendingRequests[int] = PendingRequests()
        self._lost: str | None = None
        process.start_readers(self._read_stdout())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[str], None],
        daemon_tag: str = "",
    ) -> AcpConnection:
        process = await AgentProcess.spawn(argv, env, cwd, "acp", daemon_tag)
        return cls(process, on_request, on_notification, on_lost)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def lost(self) -> str | None:
        """Why the connection is gone, or None while it works."""
        return self._lost

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._process.stderr_tail(chars)

    # --- sending ---------------------------------------------------------------------------

    async def request(self, method: str, params: Mapping[str, Json]) -> Json:
        """Send a request and wait for its response (no deadline here: the caller's actor
        has one; a dead process fails the wait)."""
        if self._lost is not None:
            raise AcpConnectionLost(self._lost)
        rid = next(self._ids)
        future = self._pending.open(rid)
        try:
            await self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            return await future
        finally:
            self._pending.drop(rid)

    async def notify(self, method: str, params: Mapping[str, Json]) -> None:
        if self._lost is not None:
            raise AcpConnectionLost(self._lost)
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: Mapping[str, Json]) -> None:
        try:
            await self._process.write_json(message)
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to the agent failed: {exc}")
            raise AcpConnectionLost(self._lost or str(exc)) from exc

    # --- receiving -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        reason = "the agent closed its stdout"
        while True:
            try:
                line = await self._process.read_line()
            except LineTooLong:
                reason = f"the agent wrote a line over {MAX_LINE_BYTES} bytes"
                break
            if line is None:
                break
            try:
                self._dispatch(line)
            except Exception:
                logger.exception("acp agent %d: cannot handle %.200r", self.pid, line)
        rc = await self._process.exit_status(EOF_GRACE_S)
        if rc is not None:
            reason = f"the agent exited with status {rc}"
        self._lose(reason)

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            # Agents print stray logs to stdout at times; not ours to crash on.
            logger.warning("acp agent %d: not JSON on stdout: %.200r", self.pid, line)
            return
        if not isinstance(message, dict):
            logger.warning("acp agent %d: not a JSON object: %.200r", self.pid, line)
            return
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str):
            if "id" in message:
                self._process.start_handler(self._answer(message["id"], method, params))
            else:
                try:
                    self._on_notification(method, params)
                except Exception:
                    logger.exception("acp agent %d: notification %s failed", self.pid, method)
            return
        rid = message.get("id")
        future = self._pending.waiting(rid) if isinstance(rid, int) else None
        if future is None:
            return
        error = message.get("error")
        if error is not None:
            error = error if isinstance(error, dict) else {"message": str(error)}
            future.set_exception(
                AcpError(
                    str(error.get("message", "error")),
                    int(error.get("code", INTERNAL_ERROR)),
                    error.get("data"),
                )
            )
        else:
            future.set_result(message.get("result"))

    async def _answer(self, rid: Json, method: str, params: Mapping[str, Json]) -> None:
        reply: dict[str, Json] = {"jsonrpc": "2.0", "id": rid}
        try:
            reply["result"] = await self._on_request(method, params)
        except AcpError as exc:
            reply["error"] = {"code": exc.code, "message": str(exc)}
        except Exception as exc:
            logger.exception("acp agent %d: request %s failed", self.pid, method)
            reply["error"] = {"code": INTERNAL_ERROR, "message": str(exc)}
        with contextlib.suppress(AcpConnectionLost):
            await self._send(reply)

    def _lose(self, reason: str) -> None:
        if self._lost is not None:
            return
        self._lost = lost = self._process.with_stderr(reason)
        self._pending.fail_all(lambda: AcpConnectionLost(lost))
        self._on_lost(lost)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the process and all it spawned (AgentProcess.close): nothing is left, even
        when the close is cut short by its caller (a deadline)."""
        self._on_lost = lambda _reason: None  # a close is not a death to report
        await self._process.close(EOF_GRACE_S)
        self._lose("closed")
