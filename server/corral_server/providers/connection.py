"""One agent process that speaks JSON lines: the connection every adapter's protocol runs on.

This module owns the process (child.py spawns and stops it), the one stdout reader, the table
of our requests that wait for an answer (each under its own deadline when it has one), and
the loss of the connection, which happens once. It knows no protocol: the protocol reads each
message (`read`), tells which of our requests a response settles (`settle`), and numbers its
requests itself (ACP and codex by JSON-RPC ids, Claude Code by control request ids).

A line that is not a JSON object is skipped with a warning where the agent is known to print
stray logs to stdout (`Framing.strict` False: ACP agents); elsewhere it breaks the connection,
since the two sides no longer agree on where the conversation is. A line over MAX_LINE_BYTES
always breaks it. Lost, for whatever reason, the connection fails every waiting request with
`ConnectionLost` (its message ends with the tail of stderr), kills the process group if the
process still runs (nothing it says can be trusted any more), and calls `on_lost` once; a
`close()` is not a loss to report. It must never hang on a dead process, and never leave one
behind after `close()`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from corral_server.clock import Clock, SystemClock
from corral_server.domain.timeline import JsonObject, JsonValue
from corral_server.providers.child import MAX_LINE_BYTES, AgentProcess, LineTooLong

logger = logging.getLogger(__name__)

# After stdout ends, how long to wait for the exit status (the better reason) before reporting
# the loss without it: a loaded machine may take a while to reap an agent.
EXIT_WAIT_S = 2.0

# Why a connection was lost: the process died, or its output broke the framing.
EXITED = "AGENT_EXITED"
PROTOCOL_ERROR = "AGENT_PROTOCOL_ERROR"

RequestKey: TypeAlias = int | str
MessageReader: TypeAlias = Callable[[JsonObject], None]


class ConnectionLost(Exception):
    """The agent process ended, or broke the framing; no answer will come."""

    def __init__(self, message: str, code: str = EXITED) -> None:
        super().__init__(message)
        self.code = code


class RequestFailed(Exception):
    """A request of ours came to nothing: the agent answered it with an error, or not at all
    within its deadline (`RequestTimeout`)."""


class RequestTimeout(RequestFailed):
    """The agent did not answer a request of ours within its deadline."""


@dataclass(frozen=True, slots=True)
class Framing:
    """What tells one agent's connection from another's."""

    who: str  # names the agent in reasons: "codex", "claude", "the agent"
    label: str  # names its tasks: "<label> stdout <pid>"
    strict: bool  # a line that is not a JSON object breaks the connection (else: skipped)
    eof_grace_s: float  # after stdin closes, how long the agent may take to exit on its own


class LineConnection:
    """Invariant: once `lost` is set, no request waits and none is sent."""

    def __init__(self, process: AgentProcess, framing: Framing, clock: Clock) -> None:
        self._process = process
        self._framing = framing
        self._clock = clock
        self._on_lost: Callable[[ConnectionLost], None] = _ignore
        self._pending: dict[RequestKey, asyncio.Future[JsonValue]] = {}
        self._lost: ConnectionLost | None = None

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        daemon_tag: str,
        framing: Framing,
        clock: Clock | None = None,
    ) -> LineConnection:
        process = await AgentProcess.spawn(argv, env, cwd, framing.label, daemon_tag)
        return cls(process, framing, clock or SystemClock())

    def start(self, read: MessageReader, on_lost: Callable[[ConnectionLost], None]) -> None:
        """Hand every message, in line order, to `read` (the protocol), and the loss to
        `on_lost`, until close()."""
        self._on_lost = on_lost
        self._process.start_readers(self._read_stdout(read))

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def tag(self) -> str:
        return self._process.tag

    @property
    def who(self) -> str:
        return self._framing.who

    @property
    def lost(self) -> ConnectionLost | None:
        """Why the connection ended (None while it lives)."""
        return self._lost

    def with_stderr(self, reason: str) -> str:
        """`reason`, followed by the tail of stderr when there is one."""
        return self._process.with_stderr(reason)

    def start_handler(self, answer: Coroutine[Any, Any, None]) -> None:
        """Run one answer to a request of the agent's as a task that close() ends."""
        self._process.start_handler(answer)

    # --- sending ---------------------------------------------------------------------------

    async def send(self, message: Mapping[str, object]) -> None:
        """Write `message` as one line; ConnectionLost when the connection is gone."""
        if self._lost is not None:
            raise self._lost_error()
        try:
            await self._process.write_json(message)
        except (ConnectionError, RuntimeError) as exc:
            self._lose(f"writing to {self._framing.who} failed: {exc}", EXITED)
            raise self._lost_error() from exc

    async def call(
        self,
        key: RequestKey,
        message: Mapping[str, object],
        what: str,
        timeout_s: float | None = None,
    ) -> JsonValue:
        """Send request `message`, known by `key`, and wait until the protocol settles it; at
        most `timeout_s` on the clock when given (`RequestTimeout` naming `what`), else as long
        as the process lives (the caller's actor has a deadline of its own)."""
        if self._lost is not None:
            raise self._lost_error()
        future: asyncio.Future[JsonValue] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        timer = None
        if timeout_s is not None:
            why = f"{self._framing.who} did not answer {what} within {timeout_s:g} s"
            timer = self._clock.call_later(timeout_s, lambda: _fail(future, RequestTimeout(why)))
        try:
            await self.send(message)
            return await future
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(key, None)

    def settle(
        self, key: JsonValue, result: JsonValue = None, error: Exception | None = None
    ) -> None:
        """The answer to our request `key`: its result, or the error it failed with. An
        answer nobody waits for (a late one, or not to us) is dropped."""
        future = self._pending.get(key) if isinstance(key, int | str) else None
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    # --- receiving -------------------------------------------------------------------------

    async def _read_stdout(self, read: MessageReader) -> None:
        who = self._framing.who
        while True:
            try:
                line = await self._process.read_line()
            except LineTooLong:
                self._lose(f"{who} wrote a line over {MAX_LINE_BYTES} bytes", PROTOCOL_ERROR)
                return
            if line is None:
                break
            message, fault = _parse(line)
            if message is None:
                if self._framing.strict:
                    self._lose(
                        f"{who} wrote a line that is {fault}: {line[:200]!r}", PROTOCOL_ERROR
                    )
                    return
                # Agents print stray logs to stdout at times; not ours to crash on.
                logger.warning("%s %d: %s on stdout: %.200r", who, self.pid, fault, line)
                continue
            try:
                read(message)
            except Exception:
                logger.exception("%s %d: cannot handle %.200r", who, self.pid, line)
        rc = await self._process.exit_status(EXIT_WAIT_S)
        reason = f"{who} closed its stdout" if rc is None else f"{who} exited with status {rc}"
        self._lose(reason, EXITED)

    def _lose(self, reason: str, code: str) -> None:
        if self._lost is not None:
            return
        if code == PROTOCOL_ERROR:
            logger.warning("%s %d: %s", self._framing.who, self.pid, reason)
        self._lost = ConnectionLost(self._process.with_stderr(reason), code)
        if self._process.returncode is None:
            self._process.kill_group()  # it lives on, but nothing it says can be trusted now
        pending, self._pending = self._pending, {}
        for future in pending.values():
            _fail(future, self._lost_error())
        self._on_lost(self._lost)

    def _lost_error(self) -> ConnectionLost:
        """A fresh exception per raise (one instance raised twice grows its traceback)."""
        lost = self._lost
        assert lost is not None
        return ConnectionLost(str(lost), lost.code)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the process and all it spawned (AgentProcess.close): nothing is left, even
        when the close is cut short by its caller (a deadline)."""
        self._on_lost = _ignore  # a close is not a death to report
        await self._process.close(self._framing.eof_grace_s)
        self._lose("closed", EXITED)


def _parse(line: bytes) -> tuple[JsonObject | None, str]:
    """The line as a JSON object, or None and what it is instead."""
    try:
        message = json.loads(line)
    except ValueError:
        return None, "not JSON"
    if not isinstance(message, dict):
        return None, "not a JSON object"
    return message, ""


def _fail(future: asyncio.Future[JsonValue], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


def _ignore(_lost: ConnectionLost) -> None:
    return None
