"""The `acp` provider's sessions: drive any Agent Client Protocol agent (protocol version 1)
as a child process, one process per corral session (the provider itself, which a daemon
builds without loading the ACP SDK, is `acp_provider.py`).

This module owns the mapping between ACP and the provider contract: `initialize` and
`session/new` make a session (`session/load`, or the unstable `session/resume`, reopen a
stored one), `session/prompt` is a turn (its stop reason is the turn's end),
`session/update` becomes timeline items, `session/cancel` is an interrupt, and
`session/request_permission` becomes a corral permission; an import keeps what `session/load`
replays (`acp_history.py`). JSON-RPC lives in `jsonrpc.py` over the process connection of
`connection.py`, the session's lifecycle in `command.py`, the confined file methods in
`acp_files.py`. It must never report an event after `close()` returns, and reports exactly one
terminal event per turn it started.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import uuid
from dataclasses import dataclass
from typing import TypeVar, assert_never

from acp import schema
from pydantic import BaseModel, ValidationError

from corral_server.domain.agent import (
    AgentError,
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
    PermissionResponse,
    Usage,
)
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.domain.timeline import JsonValue
from corral_server.errors import FailedPrecondition
from corral_server.providers import acp_files
from corral_server.providers.acp_items import ItemMapper, Update
from corral_server.providers.acp_mcp import acp_servers
from corral_server.providers.acp_settings import AcpSettings
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderPermissionRequested,
    ProviderSettings,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.command import (
    CommandSession,
    Run,
)
from corral_server.providers.connection import (
    ConnectionLost,
    Framing,
    LineConnection,
    RequestFailed,
)
from corral_server.providers.jsonrpc import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    JsonRpc,
    Params,
    RpcError,
)
from corral_server.providers.live import SettingsChange
from corral_server.providers.sandbox import FileSandbox

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
CANCELLED_OUTCOME = schema.DeniedOutcome(outcome="cancelled")

PROTOCOL_VERSION = 1
# After stdin closes, how long an agent may take to exit on its own.
FRAMING = Framing(who="the agent", label="acp", strict=False, eof_grace_s=0.3)
AGENT_ERROR = "AGENT_ERROR"  # the agent answered the prompt with a JSON-RPC error
AGENT_EXITED = "AGENT_EXITED"  # the agent process died (or broke the framing) mid-turn
CANCELLED = "cancelled"

# Which offered option answers a corral behavior, in order of preference (ACP option kinds).
_OPTION_KINDS = {
    PermissionBehavior.ALLOW: ("allow_once", "allow_always"),
    PermissionBehavior.DENY: ("reject_once", "reject_always"),
}


class AcpStartFailed(FailedPrecondition):
    """The agent did not start or failed its handshake."""


@dataclass(slots=True)
class _Run(Run):
    # The turn's `session/prompt` request, which close() cancels.
    task: asyncio.Task[None] | None = None


class AcpSession(CommandSession[_Run]):
    framing = FRAMING
    start_failed = AcpStartFailed
    cancel_reason = CANCELLED

    def __init__(self, config: SessionConfig, sink: EventSink) -> None:
        super().__init__(config, sink)
        self._rpc: JsonRpc | None = None
        self._session_id = ""
        self._items = ItemMapper()
        self._permission_ids = itertools.count(1)
        self._files = FileSandbox(config.cwd)  # the fs/ methods, confined to the cwd
        # An import's session: the updates `session/load` replays are kept here (else dropped).
        self.replayed: list[Update] | None = None
        self._settings = AcpSettings()  # the modes and models the session offers

    @property
    def session_id(self) -> str:
        return self._session_id

    def _attach(self, conn: LineConnection) -> None:
        self._rpc = JsonRpc(
            conn, self._on_request, self._on_notification, self._lost, version_member=True
        )

    async def _handshake(self) -> None:
        assert self._rpc is not None
        rpc = self._rpc
        fs = schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
        asked = schema.InitializeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(fs=fs, terminal=False),
            client_info=schema.Implementation(name="corral", version="0"),
        )
        init = _answer(schema.InitializeResponse, await rpc.request("initialize", _dump(asked)))
        if init.protocol_version != PROTOCOL_VERSION:
            version = init.protocol_version
            raise RequestFailed(f"the agent speaks protocol version {version!r}, not 1")
        capabilities = init.agent_capabilities
        servers = acp_servers(self._config.mcp_servers, capabilities)
        cwd, resume_id = self._config.cwd, self._config.resume_session_id
        if resume_id:
            method = _resume_method(capabilities)
            if self.replayed is not None and method != "session/load":
                raise RequestFailed("the agent cannot replay a stored session (no loadSession)")
            # session/load replays the whole conversation as session/update notifications
            # before it answers: no turn runs and `_session_id` is not set yet, so
            # `_on_notification` drops them (corral stored those rows when they happened).
            load = schema.LoadSessionRequest(cwd=cwd, mcp_servers=[*servers], session_id=resume_id)
            self._settings.note(await rpc.request(method, _dump(load)))
            self._session_id = resume_id
            return
        new = schema.NewSessionRequest(cwd=cwd, mcp_servers=[*servers])
        answer = await rpc.request("session/new", _dump(new))
        self._settings.note(answer)
        made = _answer(schema.NewSessionResponse, answer)
        if not made.session_id:
            raise RequestFailed("session/new answered an empty sessionId")
        self._session_id = made.session_id

    # --- turns -----------------------------------------------------------------------------

    async def start_turn(self, prompt: Prompt) -> str:
        self._check_idle()
        run = _Run(turn_id=f"turn-{uuid.uuid4().hex}")
        self._run = run
        self._items.start_turn(run.turn_id)
        self._emit(ProviderTurnStarted(run.turn_id))
        run.task = asyncio.create_task(self._prompt(run, prompt), name=f"acp {run.turn_id}")
        return run.turn_id

    async def _prompt(self, run: _Run, prompt: Prompt) -> None:
        assert self._rpc is not None
        params = schema.PromptRequest(
            session_id=self._session_id, prompt=[*_content_blocks(prompt)]
        )
        terminal: ProviderEvent
        try:
            result = await self._rpc.request("session/prompt", _dump(params))
            terminal = _terminal(run, result)
        except RequestFailed as exc:
            terminal = ProviderTurnFailed(run.turn_id, AgentError(str(exc), AGENT_ERROR))
        except ConnectionLost as exc:
            terminal = ProviderTurnFailed(run.turn_id, AgentError(str(exc), AGENT_EXITED))
        if run.canceling and not isinstance(terminal, ProviderTurnCanceled):
            # Interrupt answered CONFIRMED: the turn ends canceled whatever the agent said.
            terminal = ProviderTurnCanceled(run.turn_id, CANCELLED)
        self._end(run, terminal)

    async def _interrupt(self, run: _Run) -> InterruptResult:
        assert self._rpc is not None
        run.canceling = True
        # ACP: the client answers its pending permission requests with `cancelled`.
        run.stop_asking()
        # A dead agent fails the prompt's wait too, and the turn ends canceled.
        with contextlib.suppress(ConnectionLost):
            cancel = schema.CancelNotification(session_id=self._session_id)
            await self._rpc.notify("session/cancel", _dump(cancel))
        return InterruptResult.CONFIRMED

    async def change_settings(self, change: SettingsChange) -> None:
        assert self._rpc is not None
        await self._settings.change(self._rpc, self._session_id, change)

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        return False  # ACP v1 has no way into a running prompt: corral queues it

    async def close(self) -> None:
        self._closed = True
        run = self._run
        if run is not None and run.task is not None and not run.task.done():
            run.task.cancel()
            await asyncio.wait([run.task])
        await super().close()

    # --- from the agent --------------------------------------------------------------------

    def _on_notification(self, method: str, params: Params) -> None:
        if method != "session/update":
            return
        try:
            note = schema.SessionNotification.model_validate(params)
        except ValidationError as exc:
            logger.info("acp agent of %s: an update not of ACP: %s", self._config.agent_id, exc)
            return
        if self.replayed is not None:
            if note.session_id == self._config.resume_session_id:
                self.replayed.append(note.update)
            return
        if note.session_id == self._session_id and isinstance(
            note.update, schema.CurrentModeUpdate
        ):
            self._emit(ProviderSettings(mode=note.update.current_mode_id))
        if note.session_id != self._session_id or self._run is None:
            return  # e.g. available commands after session/new: nothing for the timeline
        for item in self._items.map(note.update):
            self._emit(item)

    async def _on_request(self, _rid: JsonValue, method: str, params: Params) -> object:
        match method:
            case "session/request_permission":
                return await self._ask(params)
            case "fs/read_text_file":
                return await acp_files.read_text_file(self._files, params)
            case "fs/write_text_file":
                return await acp_files.write_text_file(self._files, params)
            case _:
                raise RpcError(f"method not supported by corral: {method}", METHOD_NOT_FOUND)

    async def _ask(self, params: Params) -> object:
        try:
            asked = schema.RequestPermissionRequest.model_validate(params)
        except ValidationError as exc:
            raise RpcError(f"not a permission request: {exc}", INVALID_PARAMS) from exc
        cancelled = _dump(schema.RequestPermissionResponse(outcome=CANCELLED_OUTCOME))
        run = self._run
        if run is None or run.canceling:
            return cancelled
        tool = asked.tool_call
        for item in self._items.tool_call(tool):
            self._emit(item)
        request_id = f"{run.turn_id}-permission-{next(self._permission_ids)}"
        permission = PendingPermission(
            id=request_id,
            name=self._items.tool_name(tool.tool_call_id) or "tool",
            kind=tool.kind or "tool",
            title=tool.title or "",
            input=tool.raw_input if isinstance(tool.raw_input, dict) else {},
            actions=tuple(PermissionAction(o.option_id, o.name, o.kind) for o in asked.options),
            turn_id=run.turn_id,
        )
        answer = run.ask(request_id)
        self._emit(ProviderPermissionRequested(run.turn_id, permission))
        response = await run.answer(request_id, answer)
        if response is None:
            return cancelled  # the turn ended or was interrupted
        option = _chosen_option(asked.options, response)
        if option is None:
            return cancelled
        chosen = schema.AllowedOutcome(outcome="selected", option_id=option)
        return _dump(schema.RequestPermissionResponse(outcome=chosen))


def _dump(message: BaseModel) -> dict[str, object]:
    """A message of ours as JSON: the fields we set, by their ACP names."""
    return message.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _answer(shape: type[M], result: JsonValue) -> M:
    """The agent's answer to one of our requests, or RequestFailed saying what is wrong."""
    try:
        return shape.model_validate(result)
    except ValidationError as exc:
        raise RequestFailed(f"the agent answered with no {shape.__name__}: {exc}") from exc


def _resume_method(capabilities: schema.AgentCapabilities | None) -> str:
    """How this agent reopens a stored session: `session/load` (ACP v1, with a replay corral
    drops) when it offers loadSession, else the unstable `session/resume` when offered."""
    if capabilities is not None and capabilities.load_session is True:
        return "session/load"
    sessions = capabilities.session_capabilities if capabilities is not None else None
    if sessions is not None and sessions.resume is not None:
        return "session/resume"
    raise RequestFailed(
        "the agent cannot reopen a session (it offers neither loadSession nor resume)"
    )


def _chosen_option(
    options: list[schema.PermissionOption], response: PermissionResponse
) -> str | None:
    if response.selected_action_id in [o.option_id for o in options]:
        return response.selected_action_id
    for kind in _OPTION_KINDS[response.behavior]:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def _content_blocks(
    prompt: Prompt,
) -> list[schema.TextContentBlock | schema.ImageContentBlock]:
    blocks: list[schema.TextContentBlock | schema.ImageContentBlock] = []
    for part in prompt:
        match part:
            case TextPart(text=text):
                blocks.append(schema.TextContentBlock(type="text", text=text))
            case ImagePart(mime_type=mime, data=data):
                encoded = base64.b64encode(data).decode()
                blocks.append(schema.ImageContentBlock(type="image", mime_type=mime, data=encoded))
            case _:
                assert_never(part)
    return blocks


def _terminal(run: _Run, result: JsonValue) -> ProviderEvent:
    try:
        answer = schema.PromptResponse.model_validate(result)
    except ValidationError:
        stop = result.get("stopReason") if isinstance(result, dict) else None
        message = f"the agent ended the prompt with an unknown stop reason {stop!r}"
        return ProviderTurnFailed(run.turn_id, AgentError(message, AGENT_ERROR))
    if answer.stop_reason == CANCELLED:
        return ProviderTurnCanceled(run.turn_id, CANCELLED)
    return ProviderTurnCompleted(run.turn_id, _usage(answer.usage))


def _usage(usage: schema.Usage | None) -> Usage | None:
    if usage is None:
        return None
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_read_tokens or 0,
    )
