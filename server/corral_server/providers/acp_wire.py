"""One ACP agent process and its JSON-RPC 2.0 line framing (protocol version 1).

This module owns the child process (its own process group, so closing it stops whatever it
spawned, and an environment tag that finds what left the group: providers/reaping.py), the
one stdout reader, the bounded stderr tail, and the table of our requests that wait for a
response. It knows nothing of sessions or turns: requests and notifications from the agent go
to the handlers it was given.

Requests flow both ways with independent id counters, so a line is a request or notification
from the agent when it has a "method", and a response to us otherwise, never judged by its id.
It must never hang on a dead process: when stdout ends (or a line breaks the framing) every
waiting request fails with `AcpConnectionLost`, carrying the tail of stderr.
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

from corral_server.providers.reaping import TAG_ENV, kill_tagged, process_tag

logger = logging.getLogger(__name__)

# Claude Code's first lines carry its whole tool list (tens of kB); 16 MiB leaves room for
# large file contents in fs requests while a runaway line still ends the connection.
MAX_LINE_BYTES = 16 * 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024
# SIGTERM, then SIGKILL to the group after this (node agents exit within ~0.2 s of SIGTERM).
TERM_GRACE_S = 2.0
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
        proc: asyncio.subprocess.Process,
        tag: str,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_lost: Callable[[str], None],
    ) -> None:
        self._proc = proc
        self._tag = tag  # TAG_ENV of the process and all it spawns (providers/reaping.py)
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Json]] = {}
        self._lost: str | None = None
        self._stderr = bytearray()
        self._handlers: set[asyncio.Task[None]] = set()
        self._readers = [
            asyncio.create_task(self._read_stdout(), name=f"acp stdout {proc.pid}"),
            asyncio.create_task(self._read_stderr(), name=f"acp stderr {proc.pid}"),
        ]

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
        return cls(proc, tag, on_request, on_notification, on_lost)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def lost(self) -> str | None:
        """Why the connection is gone, or None while it works."""
        return self._lost

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._stderr.decode(errors="replace")[-chars:]

    # --- sending ---------------------------------------------------------------------------

    async def request(self, method: str, params: Mapping[str, Json]) -> Json:
        """Send a request and wait for its response (no deadline here: the caller's actor
        has one; a dead process fails the wait)."""
        if self._lost is not None:
            raise AcpConnectionLost(self._lost)
        rid = next(self._ids)
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            await self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(rid, None)

    async def notify(self, method: str, params: Mapping[str, Json]) -> None:
        if self._lost is not None:
            raise AcpConnectionLost(self._lost)
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: Mapping[str, Json]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to the agent failed: {exc}")
            raise AcpConnectionLost(self._lost or str(exc)) from exc

    # --- receiving -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        reason = "the agent closed its stdout"
        while True:
            try:
                raw = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                reason = f"the agent wrote a line over {MAX_LINE_BYTES} bytes"
                break
            if not raw:
                break
            try:
                self._dispatch(raw)
            except Exception:
                logger.exception("acp agent %d: cannot handle %.200r", self.pid, raw)
        rc = self._proc.returncode
        if rc is None:
            with contextlib.suppress(TimeoutError):
                rc = await asyncio.wait_for(self._proc.wait(), EOF_GRACE_S)
        if rc is not None:
            reason = f"the agent exited with status {rc}"
        self._lose(reason)

    def _dispatch(self, raw: bytes) -> None:
        line = raw.strip()
        if not line:
            return
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
                task = asyncio.create_task(self._answer(message["id"], method, params))
                self._handlers.add(task)
                task.add_done_callback(self._handlers.discard)
            else:
                try:
                    self._on_notification(method, params)
                except Exception:
                    logger.exception("acp agent %d: notification %s failed", self.pid, method)
            return
        rid = message.get("id")
        future = self._pending.get(rid) if isinstance(rid, int) else None
        if future is None or future.done():
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

    async def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        while chunk := await stderr.read(65536):
            self._stderr += chunk
            del self._stderr[:-STDERR_KEEP_BYTES]

    def _lose(self, reason: str) -> None:
        if self._lost is not None:
            return
        tail = self.stderr_tail(800).strip()
        self._lost = f"{reason}; stderr: {tail}" if tail else reason
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(AcpConnectionLost(self._lost))
        self._on_lost(self._lost)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close stdin, then SIGTERM the process group and SIGKILL it after a grace, then
        SIGKILL whatever still carries the tag. A close cut short by its caller (a deadline)
        still kills the group and the tagged processes: nothing is left."""
        self._on_lost = lambda _reason: None  # a close is not a death to report
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
        self._lose("closed")

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
