"""One `codex app-server` process and its JSON-RPC line framing (JSON-RPC 2.0 messages without
the "jsonrpc" member, one per line).

This module owns the child process (its own process group, so closing it stops whatever it
spawned, and an environment tag that finds what left the group: providers/reaping.py), the
one stdout reader, the bounded stderr tail, and the table of our requests that wait for a
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
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from corral_server.clock import Clock
from corral_server.providers.reaping import TAG_ENV, kill_tagged, process_tag

logger = logging.getLogger(__name__)

# A turn's notifications carry whole items (a command's aggregated output, a patch's diff);
# 16 MiB leaves room for large ones while a runaway line still ends the connection.
MAX_LINE_BYTES = 16 * 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024
# SIGTERM, then SIGKILL to the group after this (codex exits within ~50 ms of stdin closing).
TERM_GRACE_S = 2.0
# After stdin closes, how long codex may take to exit on its own.
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
        proc: asyncio.subprocess.Process,
        tag: str,
        clock: Clock,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[CodexConnectionLost], None],
    ) -> None:
        self._proc = proc
        self._tag = tag  # TAG_ENV of the process and all it spawns (providers/reaping.py)
        self._clock = clock
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Json]] = {}
        self._lost: CodexConnectionLost | None = None
        self._stderr = bytearray()
        self._handlers: set[asyncio.Task[None]] = set()
        self._readers = [
            asyncio.create_task(self._read_stdout(), name=f"codex stdout {proc.pid}"),
            asyncio.create_task(self._read_stderr(), name=f"codex stderr {proc.pid}"),
        ]

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
        tag = process_tag(daemon_tag)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**env, TAG_ENV: tag},
            cwd=cwd,
            start_new_session=True,  # its own process group: see close()
            limit=MAX_LINE_BYTES,
        )
        return cls(proc, tag, clock, on_request, on_notification, on_lost)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def lost(self) -> CodexConnectionLost | None:
        """Why the connection ended (None while it lives)."""
        return self._lost

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._stderr.decode(errors="replace")[-chars:]

    # --- sending ---------------------------------------------------------------------------

    async def request(self, method: str, params: Mapping[str, Json], timeout_s: float) -> Json:
        """Send a request and wait for its response, at most `timeout_s` on the clock
        (`CodexTimeout`); a dead process fails the wait at once (`CodexConnectionLost`)."""
        if self._lost is not None:
            raise self._lost_error()
        rid = next(self._ids)
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        timer = self._clock.call_later(timeout_s, lambda: _expire(future, method, timeout_s))
        try:
            await self._send({"id": rid, "method": method, "params": params})
            return await future
        finally:
            timer.cancel()
            self._pending.pop(rid, None)

    async def notify(self, method: str, params: Mapping[str, Json] | None = None) -> None:
        if self._lost is not None:
            raise self._lost_error()
        message = {"method": method} if params is None else {"method": method, "params": params}
        await self._send(message)

    async def _send(self, message: Mapping[str, Json]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to codex failed: {exc}", EXITED)
            raise self._lost_error() from exc

    # --- receiving -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        while True:
            try:
                raw = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                self._break(f"codex wrote a line over {MAX_LINE_BYTES} bytes")
                return
            if not raw:
                break
            line = raw.strip()
            if not line:
                continue
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
        rc = self._proc.returncode
        if rc is None:
            with contextlib.suppress(TimeoutError):
                rc = await asyncio.wait_for(self._proc.wait(), EOF_GRACE_S)
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
                task = asyncio.create_task(self._answer(message["id"], method, result))
                self._handlers.add(task)
                task.add_done_callback(self._handlers.discard)
            else:
                self._on_notification(method, params)
            return
        rid = message.get("id")  # a response to one of our requests
        future = self._pending.get(rid) if isinstance(rid, int) else None
        if future is None or future.done():
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

    async def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        while chunk := await stderr.read(65536):
            self._stderr += chunk
            del self._stderr[:-STDERR_KEEP_BYTES]

    def _break(self, reason: str) -> None:
        """The framing is broken: nothing more from this process can be trusted."""
        logger.warning("codex %d: %s", self.pid, reason)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._lose(reason, PROTOCOL_ERROR)

    def _lose(self, reason: str, code: str) -> None:
        if self._lost is not None:
            return
        tail = self.stderr_tail(800).strip()
        self._lost = CodexConnectionLost(f"{reason}; stderr: {tail}" if tail else reason, code)
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(self._lost_error())
        self._on_lost(self._lost)

    def _lost_error(self) -> CodexConnectionLost:
        """A fresh exception per raise (one instance raised twice grows its traceback)."""
        lost = self._lost
        assert lost is not None
        return CodexConnectionLost(str(lost), lost.code)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close stdin, then SIGTERM the process group and SIGKILL it after a grace, then
        SIGKILL whatever still carries the tag. A close cut short by its caller (a deadline)
        still kills the group and the tagged processes: nothing is left."""
        self._on_lost = lambda _lost: None  # a close is not a death to report
        try:
            await self._stop_gracefully()
        finally:
            # Stragglers whose leader exited, or a close that was canceled midway.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            kill_tagged(self._tag)
            for task in (*self._readers, *self._handlers):
                task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), TERM_GRACE_S)  # reaped: no zombie
        await asyncio.gather(*self._readers, *self._handlers, return_exceptions=True)
        self._lose("closed", EXITED)

    async def _stop_gracefully(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), EOF_GRACE_S)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), TERM_GRACE_S)


def _expire(future: asyncio.Future[Json], method: str, timeout_s: float) -> None:
    if not future.done():
        future.set_exception(CodexTimeout(f"codex did not answer {method} within {timeout_s:g} s"))


async def _raise(exc: Exception) -> Json:
    raise exc
