"""One `codex app-server` process and its JSON-RPC line framing (JSON-RPC 2.0 messages without
the "jsonrpc" member, one per line).

This module owns the framing over one codex process (its spawning, stderr tail and stopping
live in child.py), the one stdout reader, and the table of our requests that wait for a
response, each under a deadline on the injected clock. It knows nothing of threads or turns:
requests and notifications from codex go to the handlers it was given.

Requests flow both ways, and both sides count their ids from small numbers (codex's first
approval request has id 0, ours 1), so a line is a request or notification from codex when it
has a "method", and a response to us otherwise: never judged by its id.

The framing is strict: codex writes nothing but protocol lines to stdout, so a line that is not
a JSON object, or is longer than MAX_LINE_BYTES, means the connection cannot be trusted. It is
then lost (the process group is killed), every waiting request fails with
`CodexConnectionLost` naming the bad line, and the session turns that into a clear agent error.
It must never hang on a dead process, and never leave one behind after `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from corral_server.clock import Clock
from corral_server.providers.child import (
    MAX_LINE_BYTES,
    AgentProcess,
    LineTooLong,
    PendingRequests,
)

logger = logging.getLogger(__name__)

# After stdin closes, how long codex may take to exit on its own (measured: ~50 ms).
EOF_GRACE_S = 0.5

Json: TypeAlias = Any
# (codex's request id, method, params) -> the result; raise CodexError to answer an error.
# Called synchronously, in line order with the notifications, so a handler can do its
# bookkeeping before the next line is read; the awaitable it returns runs as a task.
RequestHandler: TypeAlias = Callable[[Json, str, Mapping[str, Json]], Awaitable[Json]]
NotificationHandler: TypeAlias = Callable[[str, Mapping[str, Json]], None]

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603

# Why a connection was lost: the process died, or its output broke the framing.
EXITED = "AGENT_EXITED"
PROTOCOL_ERROR = "AGENT_PROTOCOL_ERROR"


class CodexError(Exception):
    """A JSON-RPC error response to one of our requests (or one we answer codex with)."""

    def __init__(self, message: str, code: int = INTERNAL_ERROR, data: Json = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class CodexTimeout(CodexError):
    """Codex did not answer one of our requests within its deadline."""


class CodexConnectionLost(Exception):
    """The codex process ended, or broke the framing; no response will come."""

    def __init__(self, message: str, code: str = EXITED) -> None:
        super().__init__(message)
        self.code = code


class CodexConnection:
    """Invariant: once `_lost` is set, `_pending` is empty and stays empty."""

    def __init__(
        self,
        process: AgentProcess,
        clock: Clock,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[CodexConnectionLost], None],
    ) -> None:
        self._process = process
        self._clock = clock
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: PendingRequests[int] = PendingRequests()
        self._lost: CodexConnectionLost | None = None
        process.start_readers(self._read_stdout())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        clock: Clock,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[CodexConnectionLost], None],
        daemon_tag: str = "",
    ) -> CodexConnection:
        process = await AgentProcess.spawn(argv, env, cwd, "codex", daemon_tag)
        return cls(process, clock, on_request, on_notification, on_lost)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def lost(self) -> CodexConnectionLost | None:
        """Why the connection ended (None while it lives)."""
        return self._lost

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._process.stderr_tail(chars)

    # --- sending ---------------------------------------------------------------------------

    async def request(self, method: str, params: Mapping[str, Json], timeout_s: float) -> Json:
        """Send a request and wait for its response, at most `timeout_s` on the clock
        (`CodexTimeout`); a dead process fails the wait at once (`CodexConnectionLost`)."""
        if self._lost is not None:
            raise self._lost_error()
        rid = next(self._ids)
        future = self._pending.open(rid)
        timer = self._clock.call_later(timeout_s, lambda: _expire(future, method, timeout_s))
        try:
            await self._send({"id": rid, "method": method, "params": params})
            return await future
        finally:
            timer.cancel()
            self._pending.drop(rid)

    async def notify(self, method: str, params: Mapping[str, Json] | None = None) -> None:
        if self._lost is not None:
            raise self._lost_error()
        message = {"method": method} if params is None else {"method": method, "params": params}
        await self._send(message)

    async def _send(self, message: Mapping[str, Json]) -> None:
        try:
            await self._process.write_json(message)
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to codex failed: {exc}", EXITED)
            raise self._lost_error() from exc

    # --- receiving -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        while True:
            try:
                line = await self._process.read_line()
            except LineTooLong:
                self._break(f"codex wrote a line over {MAX_LINE_BYTES} bytes")
                return
            if line is None:
                break
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                self._break(f"codex wrote a line that is not a JSON object: {line[:200]!r}")
                return
            try:
                self._dispatch(message)
            except Exception:
                logger.exception("codex %d: cannot handle %.200r", self.pid, line)
        rc = await self._process.exit_status(EOF_GRACE_S)
        reason = "codex closed its stdout" if rc is None else f"codex exited with status {rc}"
        self._lose(reason, EXITED)

    def _dispatch(self, message: dict[str, Json]) -> None:
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str):  # from codex: a request when it has an id, else a note
            if "id" in message:
                try:
                    result = self._on_request(message["id"], method, params)
                except Exception as exc:
                    result = _raise(exc)
                self._process.start_handler(self._answer(message["id"], method, result))
            else:
                self._on_notification(method, params)
            return
        rid = message.get("id")  # a response to one of our requests
        future = self._pending.waiting(rid) if isinstance(rid, int) else None
        if future is None:
            return
        error = message.get("error")
        if error is not None:
            error = error if isinstance(error, dict) else {"message": str(error)}
            code = error.get("code")
            future.set_exception(
                CodexError(
                    str(error.get("message", "error")),
                    code if isinstance(code, int) else INTERNAL_ERROR,
                    error.get("data"),
                )
            )
        else:
            future.set_result(message.get("result"))

    async def _answer(self, rid: Json, method: str, result: Awaitable[Json]) -> None:
        reply: dict[str, Json] = {"id": rid}
        try:
            reply["result"] = await result
        except CodexError as exc:
            reply["error"] = {"code": exc.code, "message": str(exc)}
        except Exception as exc:
            logger.exception("codex %d: request %s failed", self.pid, method)
            reply["error"] = {"code": INTERNAL_ERROR, "message": str(exc)}
        with contextlib.suppress(CodexConnectionLost):
            await self._send(reply)

    def _break(self, reason: str) -> None:
        """The framing is broken: nothing more from this process can be trusted."""
        logger.warning("codex %d: %s", self.pid, reason)
        self._process.kill_group()
        self._lose(reason, PROTOCOL_ERROR)

    def _lose(self, reason: str, code: str) -> None:
        if self._lost is not None:
            return
        self._lost = CodexConnectionLost(self._process.with_stderr(reason), code)
        self._pending.fail_all(self._lost_error)
        self._on_lost(self._lost)

    def _lost_error(self) -> CodexConnectionLost:
        """A fresh exception per raise (one instance raised twice grows its traceback)."""
        lost = self._lost
        assert lost is not None
        return CodexConnectionLost(str(lost), lost.code)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the process and all it spawned (AgentProcess.close): nothing is left, even
        when the close is cut short by its caller (a deadline)."""
        self._on_lost = lambda _lost: None  # a close is not a death to report
        await self._process.close(EOF_GRACE_S)
        self._lose("closed", EXITED)


def _expire(future: asyncio.Future[Json], method: str, timeout_s: float) -> None:
    if not future.done():
        future.set_exception(CodexTimeout(f"codex did not answer {method} within {timeout_s:g} s"))


async def _raise(exc: Exception) -> Json:
    raise exc
