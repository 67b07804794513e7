"""One Claude Code process (`claude -p`, stream-json both ways) and its line framing.

This module owns the child process (its own process group, plus an environment tag that finds
what escaped the group), the one stdout reader, the bounded stderr tail, and the table of our
control requests that wait for a `control_response`. It knows nothing of sessions or turns:
every other line goes, in order, to the handler it was given.

It must never hang on a dead or broken process: when stdout ends, a line is not a JSON object,
or a line is longer than MAX_LINE_BYTES, the connection is lost once (with a reason that
carries the tail of stderr), the process is killed, and every waiting control request fails
with `ClaudeConnectionLost`. Stream-json is JSON lines only, so a line that is not one means
the two sides no longer agree on where the turn is: continuing could end the wrong turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from corral_server.providers.reaping import TAG_ENV, kill_tagged, process_tag

logger = logging.getLogger(__name__)

# Claude Code's first line of a turn carries its whole tool and command list (tens of kB);
# 16 MiB leaves room for large tool results while a runaway line still ends the connection.
MAX_LINE_BYTES = 16 * 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024
# After stdin closes Claude Code exits on its own (measured: ~0.05 s when idle).
EOF_GRACE_S = 0.5
# SIGTERM, then SIGKILL to the group after this.
TERM_GRACE_S = 2.0
# After stdout ends, how long to wait for the exit status before reporting the loss without it.
EXIT_WAIT_S = 2.0
# Every process this adapter starts carries TAG_ENV=<a tag of its own> in its environment
# (providers/reaping.py). Claude Code runs each Bash command in a session of its own (setsid),
# so a command's background child outlives a kill of the process group; the tag still finds it.

Json: TypeAlias = Any
MessageHandler: TypeAlias = Callable[[Mapping[str, Json]], None]


class ClaudeConnectionLost(Exception):
    """The process ended, or broke the framing; no answer will come."""


class ClaudeControlError(Exception):
    """Claude Code answered one of our control requests with an error."""


class ClaudeConnection:
    """Invariant: once `_lost` is set, `_pending` is empty and stays empty."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        tag: str,
        on_message: MessageHandler,
        on_lost: Callable[[str], None],
    ) -> None:
        self._proc = proc
        self._tag = tag
        self._on_message = on_message
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: dict[str, asyncio.Future[Json]] = {}
        self._lost: str | None = None
        self._stderr = bytearray()
        self._readers = [
            asyncio.create_task(self._read_stdout(), name=f"claude stdout {proc.pid}"),
            asyncio.create_task(self._read_stderr(), name=f"claude stderr {proc.pid}"),
        ]

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        on_message: MessageHandler,
        on_lost: Callable[[str], None],
        daemon_tag: str = "",
    ) -> ClaudeConnection:
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
        return cls(proc, tag, on_message, on_lost)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def tag(self) -> str:
        return self._tag

    @property
    def lost(self) -> str | None:
        """Why the connection is gone, or None while it works."""
        return self._lost

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._stderr.decode(errors="replace")[-chars:]

    # --- sending ---------------------------------------------------------------------------

    async def send(self, message: Mapping[str, Json]) -> None:
        if self._lost is not None:
            raise ClaudeConnectionLost(self._lost)
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to claude failed: {exc}")
            raise ClaudeConnectionLost(self._lost or str(exc)) from exc

    async def control(self, request: Mapping[str, Json]) -> Json:
        """Send a control request and wait for its response (no deadline here: the caller's
        actor has one; a dead process fails the wait)."""
        if self._lost is not None:
            raise ClaudeConnectionLost(self._lost)
        request_id = f"corral-{next(self._ids)}"
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.send(
                {"type": "control_request", "request_id": request_id, "request": request}
            )
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def respond(self, request_id: str, response: Mapping[str, Json]) -> None:
        """Answer a control request of Claude Code's with success."""
        await self.send(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": response},
            }
        )

    async def refuse(self, request_id: str, error: str) -> None:
        """Answer a control request of Claude Code's with an error."""
        await self.send(
            {
                "type": "control_response",
                "response": {"subtype": "error", "request_id": request_id, "error": error},
            }
        )

    # --- receiving -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        reason = "claude closed its stdout"
        while True:
            try:
                raw = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                reason = f"claude wrote a line over {MAX_LINE_BYTES} bytes"
                break
            if not raw:
                break
            broken = self._dispatch(raw)
            if broken is not None:
                reason = broken
                break
        if reason == "claude closed its stdout":
            # Its exit status makes the better reason; a loaded machine may take a while.
            rc = self._proc.returncode
            if rc is None:
                with contextlib.suppress(TimeoutError):
                    rc = await asyncio.wait_for(self._proc.wait(), EXIT_WAIT_S)
            if rc is not None:
                reason = f"claude exited with status {rc}"
        self._lose(reason)
        if self._proc.returncode is None:
            # It broke the framing but lives on: nothing it says can be trusted now.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _dispatch(self, raw: bytes) -> str | None:
        """Hand one line on; returns why the framing broke, or None."""
        line = raw.strip()
        if not line:
            return None
        try:
            message = json.loads(line)
        except ValueError:
            return f"claude wrote a line that is not JSON: {line[:200]!r}"
        if not isinstance(message, dict):
            return f"claude wrote a line that is not a JSON object: {line[:200]!r}"
        if message.get("type") == "control_response":
            self._settle(message.get("response"))
            return None
        try:
            self._on_message(message)
        except Exception:
            logger.exception("claude %d: cannot handle %.200r", self.pid, line)
        return None

    def _settle(self, response: Json) -> None:
        if not isinstance(response, dict):
            return
        future = self._pending.get(str(response.get("request_id")))
        if future is None or future.done():
            return
        if response.get("subtype") == "error":
            future.set_exception(ClaudeControlError(str(response.get("error", "error"))))
        else:
            future.set_result(response.get("response"))

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
                future.set_exception(ClaudeConnectionLost(self._lost))
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
            # Stragglers whose leader exited, a close canceled midway, escaped commands.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            kill_tagged(self._tag)
            for task in self._readers:
                task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), TERM_GRACE_S)  # reaped: no zombie
        await asyncio.gather(*self._readers, return_exceptions=True)
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
