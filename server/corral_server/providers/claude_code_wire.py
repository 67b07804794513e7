"""One Claude Code process (`claude -p`, stream-json both ways) and its line framing.

This module owns the framing over one Claude Code process (its spawning, stderr tail and
stopping live in child.py), the one stdout reader, and the table of our control requests that
wait for a `control_response`. It knows nothing of sessions or turns: every other line goes,
in order, to the handler it was given.

It must never hang on a dead or broken process: when stdout ends, a line is not a JSON object,
or a line is longer than MAX_LINE_BYTES, the connection is lost once (with a reason that
carries the tail of stderr), the process is killed, and every waiting control request fails
with `ClaudeConnectionLost`. Stream-json is JSON lines only, so a line that is not one means
the two sides no longer agree on where the turn is: continuing could end the wrong turn.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from corral_server.providers.child import (
    MAX_LINE_BYTES,
    AgentProcess,
    LineTooLong,
    PendingRequests,
)

logger = logging.getLogger(__name__)

# After stdin closes Claude Code exits on its own (measured: ~0.05 s when idle).
EOF_GRACE_S = 0.5
# After stdout ends, how long to wait for the exit status before reporting the loss without it.
EXIT_WAIT_S = 2.0
# Claude Code runs each Bash command in a session of its own (setsid), so a command's
# background child outlives a kill of the process group; the tag (child.py) still finds it.

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
        process: AgentProcess,
        on_message: MessageHandler,
        on_lost: Callable[[str], None],
    ) -> None:
        self._process = process
        self._on_message = on_message
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: PendingRequests[str] = PendingRequests()
        self._lost: str | None = None
        process.start_readers(self._read_stdout())

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
        process = await AgentProcess.spawn(argv, env, cwd, "claude", daemon_tag)
        return cls(process, on_message, on_lost)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def tag(self) -> str:
        return self._process.tag

    @property
    def lost(self) -> str | None:
        """Why the connection is gone, or None while it works."""
        return self._lost

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._process.stderr_tail(chars)

    # --- sending ---------------------------------------------------------------------------

    async def send(self, message: Mapping[str, Json]) -> None:
        if self._lost is not None:
            raise ClaudeConnectionLost(self._lost)
        try:
            await self._process.write_json(message)
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to claude failed: {exc}")
            raise ClaudeConnectionLost(self._lost or str(exc)) from exc

    async def control(self, request: Mapping[str, Json]) -> Json:
        """Send a control request and wait for its response (no deadline here: the caller's
        actor has one; a dead process fails the wait)."""
        if self._lost is not None:
            raise ClaudeConnectionLost(self._lost)
        request_id = f"corral-{next(self._ids)}"
        future = self._pending.open(request_id)
        try:
            await self.send(
                {"type": "control_request", "request_id": request_id, "request": request}
            )
            return await future
        finally:
            self._pending.drop(request_id)

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
        reason = "claude closed its stdout"
        while True:
            try:
                line = await self._process.read_line()
            except LineTooLong:
                reason = f"claude wrote a line over {MAX_LINE_BYTES} bytes"
                break
            if line is None:
                break
            broken = self._dispatch(line)
            if broken is not None:
                reason = broken
                break
        if reason == "claude closed its stdout":
            # Its exit status makes the better reason; a loaded machine may take a while.
            rc = await self._process.exit_status(EXIT_WAIT_S)
            if rc is not None:
                reason = f"claude exited with status {rc}"
        self._lose(reason)
        if self._process.returncode is None:
            # It broke the framing but lives on: nothing it says can be trusted now.
            self._process.kill_group()

    def _dispatch(self, line: bytes) -> str | None:
        """Hand one line on; returns why the framing broke, or None."""
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
        future = self._pending.waiting(str(response.get("request_id")))
        if future is None:
            return
        if response.get("subtype") == "error":
            future.set_exception(ClaudeControlError(str(response.get("error", "error"))))
        else:
            future.set_result(response.get("response"))

    def _lose(self, reason: str) -> None:
        if self._lost is not None:
            return
        self._lost = lost = self._process.with_stderr(reason)
        self._pending.fail_all(lambda: ClaudeConnectionLost(lost))
        self._on_lost(lost)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the process and all it spawned (AgentProcess.close): nothing is left, even
        when the close is cut short by its caller (a deadline)."""
        self._on_lost = lambda _reason: None  # a close is not a death to report
        await self._process.close(EOF_GRACE_S)
        self._lose("closed")
