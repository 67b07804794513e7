"""The `claude-code` provider: drives Claude Code (`claude -p`, stream-json both ways) as a
child process, one process per corral session.

This module owns the mapping between Claude Code's stream-json protocol and the provider
contract: a user line is a turn and its `result` line the turn's end; a `can_use_tool` control
request is a corral permission; an `interrupt` control request is an interrupt. The control
protocol lives in `claude_code_wire.py` over the process connection of `connection.py`, the
session's lifecycle in `command.py`, the items in `claude_code_items.py`.

The session id is Claude Code's: a new session is started with `--session-id` (so the id is
known when the session is made, before any turn) and a stored one with `--resume`; whatever
id the agent then reports in its own `system`/`result` lines wins. It must never report an
event after `close()` returns, and reports exactly one terminal event per turn it started.
"""

from __future__ import annotations

import base64
import itertools
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import assert_never, cast

from corral_server.domain.agent import (
    AgentError,
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
)
from corral_server.domain.content import ImagePart, Prompt, TextPart, prompt_text
from corral_server.domain.timeline import JsonObject
from corral_server.errors import FailedPrecondition
from corral_server.providers import claude_code_history
from corral_server.providers import claude_code_items as items
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderItem,
    ProviderMode,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderSettings,
    ProviderTitle,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.claude_code_messages import (
    ControlCancelLine,
    ControlRequestBody,
    ControlRequestLine,
    ImageSource,
    InputBlock,
    ResultLine,
    ToolAnswer,
    UserInput,
    as_line,
)
from corral_server.providers.claude_code_wire import FRAMING, ClaudeControl, settings_requests
from corral_server.providers.command import CommandProvider, CommandSession, Run
from corral_server.providers.connection import (
    ConnectionLost,
    LineConnection,
    RequestFailed,
)
from corral_server.providers.live import SettingsChange, SettingsRefused
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

# The head of the first prompt a title is asked from: enough to name it, bounded whatever the
# prompt's size.
_TITLE_INPUT = 4_096

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


class ClaudeCodeProvider(CommandProvider):
    kind = "claude-code"
    modes = MODES

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        name: str = "claude-code",
        ask_title: bool = False,
    ) -> None:
        super().__init__(argv, env, name=name)
        # Ask a new session's title of Claude Code (one model call of its own, beside the
        # first turn: docs/design.md#titles). The daemon's providers do (registry.py).
        self._ask_title = ask_title

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ClaudeCodeSession:
        session = ClaudeCodeSession(config, sink, ask_title=self._ask_title)
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
class _Run(Run):
    # Claude Code's control request id of each permission the turn waits on, by corral's id.
    claude_ids: dict[str, str] = field(default_factory=dict)


class ClaudeCodeSession(CommandSession[_Run]):
    framing = FRAMING
    start_failed = ClaudeStartFailed
    cancel_reason = items.CANCELLED

    def __init__(self, config: SessionConfig, sink: EventSink, *, ask_title: bool = False) -> None:
        super().__init__(config, sink)
        self._control: ClaudeControl | None = None
        self._session_id = config.resume_session_id or str(uuid.uuid4())
        self._items = items.ItemMapper()
        self._permission_ids = itertools.count(1)
        # The error of a result outside any turn (claude's reason to exit at start).
        self._stray_error = ""
        # A new session asks for its title once, with its first prompt (a resumed one had
        # its first turn before).
        self._title_asked = bool(config.resume_session_id) or not ask_title

    @property
    def session_id(self) -> str:
        return self._session_id

    def _attach(self, conn: LineConnection) -> None:
        self._control = ClaudeControl(conn, self._on_message, self._lost)

    async def _handshake(self) -> None:
        """`initialize`: a session that cannot be resumed makes Claude Code exit at once,
        which fails the handshake with its reason."""
        assert self._control is not None
        await self._control.control({"subtype": "initialize"})

    def _start_failure(self, reason: str) -> str:
        return "; ".join(filter(None, (self._stray_error, reason)))

    # --- turns -----------------------------------------------------------------------------

    async def start_turn(self, prompt: Prompt) -> str:
        self._check_idle()
        assert self._control is not None
        run = _Run(turn_id=f"turn-{uuid.uuid4().hex}")
        self._run = run
        self._items.start_turn(run.turn_id)
        self._emit(ProviderTurnStarted(run.turn_id))
        line: UserInput = {
            "type": "user",
            "message": {"role": "user", "content": _content_blocks(prompt)},
            "parent_tool_use_id": None,
            "session_id": self._session_id,
        }
        try:
            await self._control.send(line)
        except ConnectionLost as exc:
            self._end(run, ProviderTurnFailed(run.turn_id, AgentError(str(exc), AGENT_EXITED)))
        if not self._title_asked and self._conn is not None and (text := prompt_text(prompt)):
            self._title_asked = True
            self._conn.start_handler(self._ask_title(text.strip()))
        return run.turn_id

    async def _ask_title(self, description: str) -> None:
        """Claude Code's side request for a session title (`generate_session_title`: one
        model call of its own, beside the turn), reported as the provider's title. A failure
        is only logged: a title never touches the turn (docs/design.md#titles). No deadline
        of its own: close() ends it with the session."""
        assert self._control is not None
        request = {"subtype": "generate_session_title", "description": description[:_TITLE_INPUT]}
        try:
            answer = await self._control.control({**request, "persist": False})
        except (RequestFailed, ConnectionLost) as exc:
            logger.info("claude: no session title: %s", exc)
            return
        title = answer.get("title") if isinstance(answer, dict) else None
        if isinstance(title, str) and title.strip():
            self._emit(ProviderTitle(title))

    async def _interrupt(self, run: _Run) -> InterruptResult:
        assert self._control is not None
        run.canceling = True
        try:
            await self._control.control({"subtype": "interrupt"})
        except RequestFailed:
            if self._run is not run:
                return InterruptResult.NOT_RUNNING  # it ended by itself meanwhile
            run.canceling = False
            return InterruptResult.REFUSED
        except ConnectionLost:
            pass  # a dead agent ends the turn too: canceled, as confirmed
        return InterruptResult.CONFIRMED

    async def change_settings(self, change: SettingsChange) -> None:
        """Claude Code's `set_model` and `set_permission_mode` control requests, each
        answered before the next; its refusal is the reason."""
        assert self._control is not None
        try:
            for request in settings_requests(change.model, change.mode, DEFAULT_MODE):
                await self._control.control(request)
        except (RequestFailed, ConnectionLost) as exc:
            raise SettingsRefused(f"claude did not change the {change.describe()}: {exc}") from None
        self._emit(ProviderSettings(change.model, change.mode))

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        # Not offered: what claude does with a user line sent mid-turn is not mapped yet, and
        # every user line must stay one turn with one result. Corral queues the prompt.
        return False

    # --- from the agent --------------------------------------------------------------------

    def _on_message(self, message: JsonObject) -> None:
        line = as_line(message)
        kind = line.get("type")
        reported = line.get("session_id")
        said = kind == "result" or (kind == "system" and message.get("subtype") == "init")
        if said and isinstance(reported, str) and reported:
            self._session_id = reported  # the agent's own word wins
        match kind:
            case "control_request":
                assert self._conn is not None
                request = cast(ControlRequestLine, line)
                self._conn.start_handler(self._on_control_request(request))
            case "control_cancel_request":
                self._withdrawn(str(cast(ControlCancelLine, line).get("request_id")))
            case "result":
                self._on_result(cast(ResultLine, line))
            case _:
                if self._run is None:
                    return  # nothing of a turn: e.g. a late line of a canceled one
                for item in self._items.map(line):
                    self._emit(item)

    def _on_result(self, result: ResultLine) -> None:
        run = self._run
        if run is None:
            if result.get("is_error") is True:
                self._stray_error = items.error_of(result).message
            logger.info("claude of %s: a result outside a turn", self._config.agent_id)
            return
        self._end(run, items.terminal(run.turn_id, result, run.canceling))

    async def _on_control_request(self, line: ControlRequestLine) -> None:
        assert self._control is not None
        request_id = str(line.get("request_id", ""))
        request = line.get("request")
        request = request if isinstance(request, dict) else ControlRequestBody()
        try:
            if request.get("subtype") == "can_use_tool":
                answer = await self._ask(request_id, request)
                if answer is not None:
                    await self._control.respond(request_id, answer)
            else:
                subtype = request.get("subtype")
                await self._control.refuse(request_id, f"not supported by corral: {subtype}")
        except ConnectionLost:
            pass  # the turn ends with the connection

    async def _ask(self, claude_request_id: str, request: ControlRequestBody) -> ToolAnswer | None:
        """Ask corral; the answer for Claude Code, or None when nobody waits for one (Claude
        Code withdrew the request, or the session closed)."""
        denied: ToolAnswer = {"behavior": "deny", "message": "the turn ended"}
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
        answer = run.ask(request_id)
        run.claude_ids[request_id] = claude_request_id
        self._emit(ProviderPermissionRequested(run.turn_id, permission))
        try:
            response = await run.answer(request_id, answer)
        finally:
            run.claude_ids.pop(request_id, None)
        if response is None:
            return None
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
        for request_id, claude_id in list(run.claude_ids.items()):
            answer = run.asking.get(request_id)
            if claude_id == claude_request_id and answer is not None and not answer.done():
                answer.cancel()
                self._emit(ProviderPermissionResolved(run.turn_id, request_id, None))


def _content_blocks(prompt: Prompt) -> list[InputBlock]:
    blocks: list[InputBlock] = []
    for part in prompt:
        match part:
            case TextPart(text=text):
                blocks.append({"type": "text", "text": text})
            case ImagePart(mime_type=mime, data=data):
                source: ImageSource = {
                    "type": "base64",
                    "media_type": mime,
                    "data": base64.b64encode(data).decode(),
                }
                blocks.append({"type": "image", "source": source})
            case _:
                assert_never(part)
    return blocks
