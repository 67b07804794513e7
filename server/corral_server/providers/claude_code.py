"""The `claude-code` provider: drives Claude Code (`claude -p`, stream-json both ways) as a
child process, one process per corral session (issue 8, item 4).

This module owns the mapping between Claude Code's stream-json protocol and the provider
contract: a user line is a turn and its `result` line the turn's end; a `can_use_tool` control
request is a corral permission; an `interrupt` control request is an interrupt. The process and
the framing live in `claude_code_wire.py`, the items in `claude_code_items.py`.

The session id is Claude Code's: a new session is started with `--session-id` (so the id is
known when the session is made, before any turn) and a stored one with `--resume`; whatever
id the agent then reports in its own `system`/`result` lines wins. It must never report an
event after `close()` returns, and reports exactly one terminal event per turn it started.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import shutil
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from corral_server.domain.agent import (
    AgentError,
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
    PermissionResponse,
)
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.errors import AgentBusy, AgentClosed, FailedPrecondition
from corral_server.providers import claude_code_history
from corral_server.providers import claude_code_items as items
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderInfo,
    ProviderItem,
    ProviderMode,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderSessionDied,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.claude_code_wire import (
    ClaudeConnection,
    ClaudeConnectionLost,
    ClaudeControlError,
    Json,
)
from corral_server.providers.mcp_servers import claude_flags, token_environment

logger = logging.getLogger(__name__)

AGENT_EXITED = "AGENT_EXITED"  # the process died (or broke the framing) mid-turn

# The protocol flags this adapter speaks; `argv` is only the command before them.
PROTOCOL_FLAGS = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--permission-prompt-tool",
    "stdio",
)

# Claude Code's permission modes (`--permission-mode`). The first is its default, which
# 2.1.3xx reports as "default" but does not take as a flag value: no flag is passed for it.
DEFAULT_MODE = "default"
MODES = (
    ProviderMode(DEFAULT_MODE, "Default", "asks before edits and commands"),
    ProviderMode("acceptEdits", "Accept edits", "edits without asking; asks before commands"),
    ProviderMode("plan", "Plan", "reads and plans; changes nothing"),
    ProviderMode("dontAsk", "Don't ask", "denies whatever would need a permission"),
    ProviderMode("bypassPermissions", "Bypass permissions", "never asks (as root: IS_SANDBOX=1)"),
)

ALLOW_ACTION = PermissionAction("allow", "Allow", "allow_once")
DENY_ACTION = PermissionAction("deny", "Deny", "reject_once")

# The kind of a permission by tool (ACP's tool kinds, so clients show both alike).
_TOOL_KINDS = {
    "Bash": "execute",
    "Write": "edit",
    "Edit": "edit",
    "MultiEdit": "edit",
    "NotebookEdit": "edit",
    "Read": "read",
    "WebFetch": "fetch",
    "WebSearch": "fetch",
}


class ClaudeStartFailed(FailedPrecondition):
    """Claude Code did not start, or its session could not be opened or resumed."""


class ClaudeCodeProvider:
    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str], *, name: str = "claude-code"
    ) -> None:
        self._argv = tuple(argv)
        self._env = dict(env)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def info(self) -> ProviderInfo:
        path = self._env.get("PATH")
        found = bool(self._argv) and shutil.which(self._argv[0], path=path) is not None
        reason = "" if found else f"{self._argv[0] if self._argv else '(no command)'} not found"
        return ProviderInfo(self._name, "claude-code", found, reason, modes=MODES)

    def validate_prompt(self, prompt: Prompt) -> None:
        return None  # text and images both go to Claude Code as content blocks

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ClaudeCodeSession:
        session = ClaudeCodeSession(config, sink)
        env = {**self._env, **token_environment(config.mcp_servers)}
        await session.start(self.command(config, session.session_id), env)
        return session

    async def import_history(
        self, provider_session_id: str, cwd: str, daemon_tag: str
    ) -> list[ProviderItem]:
        """The session's transcript (`claude_code_history.py`); nothing is started."""
        return await claude_code_history.import_history(self._env, provider_session_id, cwd)

    def command(self, config: SessionConfig, session_id: str) -> list[str]:
        argv = [*self._argv, *PROTOCOL_FLAGS]
        if config.resume_session_id:
            argv += ["--resume", config.resume_session_id]
        else:
            argv += ["--session-id", session_id]
        if config.model:
            argv += ["--model", config.model]
        if config.mode and config.mode != DEFAULT_MODE:
            argv += ["--permission-mode", config.mode]
        return argv + claude_flags(config.mcp_servers)


@dataclass(slots=True)
class _Run:
    """The running turn: set from `start_turn` until its terminal event is reported."""

    turn_id: str
    canceling: bool = False
    # Permissions the turn waits on, by corral request id: Claude Code's request id and the
    # answer's future.
    asking: dict[str, _Asking] = field(default_factory=dict)


@dataclass(slots=True)
class _Asking:
    claude_request_id: str
    answer: asyncio.Future[PermissionResponse]


class ClaudeCodeSession:
    def __init__(self, config: SessionConfig, sink: EventSink) -> None:
        self._config = config
        self._sink = sink
        self._conn: ClaudeConnection | None = None
        self._session_id = config.resume_session_id or str(uuid.uuid4())
        self._run: _Run | None = None
        self._items = items.ItemMapper()
        self._permission_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        # The error of a result outside any turn (claude's reason to exit at start).
        self._stray_error = ""
        # Set once the handshake succeeded: from then on a death is reported to the sink.
        self._ready = False
        self._closed = False

    @property
    def session_id(self) -> str:
        return self._session_id

    async def start(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """Start the process and its handshake (`initialize`): a session that cannot be
        resumed makes Claude Code exit at once, which fails the handshake with its reason."""
        try:
            self._conn = await ClaudeConnection.spawn(
                argv, env, self._config.cwd, self._on_message, self._lost, self._config.daemon_tag
            )
        except OSError as exc:
            raise ClaudeStartFailed(f"cannot start {argv[0] if argv else ''}: {exc}") from exc
        try:
            await self._conn.control({"subtype": "initialize"})
        except BaseException as exc:
            reason = "; ".join(filter(None, (self._stray_error, self._conn.lost or str(exc))))
            await self._conn.close()
            if isinstance(exc, ClaudeControlError | ClaudeConnectionLost):
                raise ClaudeStartFailed(f"claude failed its handshake: {reason}") from exc
            raise
        self._ready = True
        if self._conn.lost is not None:  # it died right after its answer
            self._lost(self._conn.lost)

    # --- turns -----------------------------------------------------------------------------

    async def start_turn(self, prompt: Prompt) -> str:
        if self._closed or self._conn is None:
            raise AgentClosed(self._config.agent_id)
        if self._run is not None:
            raise AgentBusy(self._config.agent_id, self._run.turn_id)
        run = _Run(turn_id=f"turn-{uuid.uuid4().hex}")
        self._run = run
        self._items.start_turn(run.turn_id)
        self._emit(ProviderTurnStarted(run.turn_id))
        line = {
            "type": "user",
            "message": {"role": "user", "content": _content_blocks(prompt)},
            "parent_tool_use_id": None,
            "session_id": self._session_id,
        }
        try:
            await self._conn.send(line)
        except ClaudeConnectionLost as exc:
            self._end(run, ProviderTurnFailed(run.turn_id, AgentError(str(exc), AGENT_EXITED)))
        return run.turn_id

    def _end(self, run: _Run, terminal: ProviderEvent) -> None:
        if self._run is not run:
            return  # ended already
        self._run = None
        for asking in run.asking.values():
            if not asking.answer.done():
                asking.answer.cancel()
        try:
            self._emit(terminal)
        except Exception:
            logger.exception("sink raised on the terminal event of turn %s", run.turn_id)

    async def interrupt(self, turn_id: str) -> InterruptResult:
        run = self._run
        if run is None or (turn_id and run.turn_id != turn_id) or self._conn is None:
            return InterruptResult.NOT_RUNNING  # fenced: never stop a turn it was not meant for
        if run.canceling:
            return InterruptResult.CONFIRMED
        run.canceling = True
        try:
            await self._conn.control({"subtype": "interrupt"})
        except ClaudeControlError:
            if self._run is not run:
                return InterruptResult.NOT_RUNNING  # it ended by itself meanwhile
            run.canceling = False
            return InterruptResult.REFUSED
        except ClaudeConnectionLost:
            pass  # a dead agent ends the turn too: canceled, as confirmed
        return InterruptResult.CONFIRMED

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        # Not offered: what claude does with a user line sent mid-turn is not mapped yet, and
        # every user line must stay one turn with one result. Corral queues the prompt.
        return False

    async def respond_permission(
        self, turn_id: str, request_id: str, response: PermissionResponse
    ) -> None:
        run = self._run
        asking = run.asking.get(request_id) if run is not None and run.turn_id == turn_id else None
        if asking is None or asking.answer.done():
            raise FailedPrecondition(f"turn {turn_id!r} is not waiting for {request_id!r}")
        asking.answer.set_result(response)

    async def close(self) -> None:
        self._closed = True
        run, self._run = self._run, None
        if run is not None:
            for asking in run.asking.values():
                asking.answer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()

    # --- from the agent --------------------------------------------------------------------

    def _emit(self, event: ProviderEvent) -> None:
        if not self._closed:
            self._sink(event)

    def _lost(self, reason: str) -> None:
        """The process died outside `close()` (which silences this): a running turn ends
        (canceled when an interrupt was confirmed, else failed), then the death is reported.
        During the handshake nobody listens yet: the start fails with the reason instead."""
        logger.warning("claude of %s is gone: %s", self._config.agent_id, reason)
        run = self._run
        if run is not None:
            failed = ProviderTurnFailed(run.turn_id, AgentError(reason, AGENT_EXITED))
            self._end(run, items.terminal(run.turn_id, {}, True) if run.canceling else failed)
        if self._ready:
            self._emit(ProviderSessionDied(reason))

    def _on_message(self, line: Mapping[str, Json]) -> None:
        kind = line.get("type")
        reported = line.get("session_id")
        said = kind == "result" or (kind == "system" and line.get("subtype") == "init")
        if said and isinstance(reported, str) and reported:
            self._session_id = reported  # the agent's own word wins
        match kind:
            case "control_request":
                self._spawn(self._on_control_request(line))
            case "control_cancel_request":
                self._withdrawn(str(line.get("request_id")))
            case "result":
                run = self._run
                if run is None:
                    if line.get("is_error") is True:
                        self._stray_error = items.error_of(line).message
                    logger.info("claude of %s: a result outside a turn", self._config.agent_id)
                    return
                self._end(run, items.terminal(run.turn_id, line, run.canceling))
            case _:
                if self._run is None:
                    return  # nothing of a turn: e.g. a late line of a canceled one
                for item in self._items.map(line):
                    self._emit(item)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_control_request(self, line: Mapping[str, Json]) -> None:
        assert self._conn is not None
        request_id = str(line.get("request_id", ""))
        request = line.get("request")
        request = request if isinstance(request, dict) else {}
        try:
            if request.get("subtype") == "can_use_tool":
                answer = await self._ask(request_id, request)
                if answer is not None:
                    await self._conn.respond(request_id, answer)
            else:
                subtype = request.get("subtype")
                await self._conn.refuse(request_id, f"not supported by corral: {subtype}")
        except ClaudeConnectionLost:
            pass  # the turn ends with the connection

    async def _ask(self, claude_request_id: str, request: Mapping[str, Json]) -> Json | None:
        """Ask corral; the answer for Claude Code, or None when nobody waits for one (Claude
        Code withdrew the request, or the session closed)."""
        denied = {"behavior": "deny", "message": "the turn ended"}
        run = self._run
        if run is None or run.canceling:
            return denied
        tool = str(request.get("tool_name") or "tool")
        tool_input = request.get("input")
        tool_input = tool_input if isinstance(tool_input, dict) else {}
        call_id = str(request.get("tool_use_id") or "")
        title = request.get("title") or request.get("description") or f"Allow {tool}?"
        request_id = f"{run.turn_id}-permission-{next(self._permission_ids)}"
        permission = PendingPermission(
            id=request_id,
            name=str(request.get("display_name") or tool),
            kind=_TOOL_KINDS.get(tool, "other"),
            title=str(title),
            input=tool_input,
            actions=(ALLOW_ACTION, DENY_ACTION),
            turn_id=run.turn_id,
        )
        answer: asyncio.Future[PermissionResponse] = asyncio.get_running_loop().create_future()
        run.asking[request_id] = _Asking(claude_request_id, answer)
        self._emit(ProviderPermissionRequested(run.turn_id, permission))
        try:
            response = await answer
        except asyncio.CancelledError:
            if answer.cancelled():
                return None
            raise
        finally:
            run.asking.pop(request_id, None)
        if response.behavior is PermissionBehavior.ALLOW:
            if (running := self._items.running(call_id)) is not None:
                self._emit(running)
            updated = response.updated_input
            return {"behavior": "allow", "updatedInput": dict(updated or tool_input)}
        return {"behavior": "deny", "message": response.message or "denied by the user"}

    def _withdrawn(self, claude_request_id: str) -> None:
        """Claude Code no longer waits for a request (an interrupt): it ends unanswered."""
        run = self._run
        if run is None:
            return
        for request_id, asking in list(run.asking.items()):
            if asking.claude_request_id == claude_request_id and not asking.answer.done():
                asking.answer.cancel()
                self._emit(ProviderPermissionResolved(run.turn_id, request_id, None))


def _content_blocks(prompt: Prompt) -> list[dict[str, Json]]:
    blocks: list[dict[str, Json]] = []
    for part in prompt:
        match part:
            case TextPart(text=text):
                blocks.append({"type": "text", "text": text})
            case ImagePart(mime_type=mime, data=data):
                source = {
                    "type": "base64",
                    "media_type": mime,
                    "data": base64.b64encode(data).decode(),
                }
                blocks.append({"type": "image", "source": source})
            case _:
                assert_never(part)
    return blocks
