"""The `acp` provider: drives any Agent Client Protocol agent (protocol version 1) as a child
process, one process per corral session.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, assert_never

from corral_server.domain.agent import (
    AgentError,
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
    PermissionResponse,
    Usage,
)
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.errors import FailedPrecondition
from corral_server.providers import acp_files
from corral_server.providers.acp_history import history_items
from corral_server.providers.acp_items import ItemMapper
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderItem,
    ProviderPermissionRequested,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.command import (
    CommandProvider,
    CommandSession,
    Run,
    ignore_events,
    import_config,
)
from corral_server.providers.connection import (
    ConnectionLost,
    Framing,
    LineConnection,
    RequestFailed,
)
from corral_server.providers.jsonrpc import METHOD_NOT_FOUND, JsonRpc, RpcError
from corral_server.providers.mcp_servers import acp_servers
from corral_server.providers.sandbox import FileSandbox

logger = logging.getLogger(__name__)

Json: TypeAlias = Any

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


class AcpProvider(CommandProvider):
    kind = "acp"

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, name: str = "acp") -> None:
        super().__init__(argv, env, name=name)

    async def create_session(self, config: SessionConfig, sink: EventSink) -> AcpSession:
        session = AcpSession(config, sink)
        await session.start(self._argv, self._env)
        return session

    async def import_history(
        self, provider_session_id: str, cwd: str, daemon_tag: str
    ) -> list[ProviderItem]:
        """What `session/load` of the session replays (`acp_history.py`), in a process of
        its own, closed before this returns. An agent without loadSession, or that does not
        know the session, is AcpStartFailed with the agent's reason."""
        config = import_config(provider_session_id, cwd, daemon_tag)
        session = AcpSession(config, ignore_events)
        session.replayed = []
        await session.start(self._argv, self._env)
        try:
            return history_items(session.replayed)
        finally:
            await session.close()


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
        self.replayed: list[Mapping[str, Json]] | None = None

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
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}
        init: Json = await rpc.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": capabilities,
                "clientInfo": {"name": "corral", "version": "0"},
            },
        )
        version = init.get("protocolVersion") if isinstance(init, dict) else None
        if version != PROTOCOL_VERSION:
            raise RequestFailed(f"the agent speaks protocol version {version!r}, not 1")
        servers = acp_servers(self._config.mcp_servers, init.get("agentCapabilities"))
        params = {"cwd": self._config.cwd, "mcpServers": servers}
        resume_id = self._config.resume_session_id
        if resume_id:
            method = _resume_method(init.get("agentCapabilities"))
            if self.replayed is not None and method != "session/load":
                raise RequestFailed("the agent cannot replay a stored session (no loadSession)")
            # session/load replays the whole conversation as session/update notifications
            # before it answers: no turn runs and `_session_id` is not set yet, so
            # `_on_notification` drops them (corral stored those rows when they happened).
            await rpc.request(method, {**params, "sessionId": resume_id})
            self._session_id = resume_id
            return
        made: Json = await rpc.request("session/new", params)
        session_id = made.get("sessionId") if isinstance(made, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise RequestFailed(f"session/new answered without a sessionId: {made!r}")
        self._session_id = session_id

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
        params = {"sessionId": self._session_id, "prompt": _content_blocks(prompt)}
        terminal: ProviderEvent
        try:
            result = await self._rpc.request("session/prompt", params)
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
            await self._rpc.notify("session/cancel", {"sessionId": self._session_id})
        return InterruptResult.CONFIRMED

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

    def _on_notification(self, method: str, params: Mapping[str, Json]) -> None:
        update = params.get("update")
        if self.replayed is not None and method == "session/update" and isinstance(update, dict):
            if params.get("sessionId") == self._config.resume_session_id:
                self.replayed.append(update)
            return
        if method != "session/update" or params.get("sessionId") != self._session_id:
            return
        run = self._run
        if run is None or not isinstance(update, dict):
            return  # e.g. available commands after session/new: nothing for the timeline
        for item in self._items.map(update):
            self._emit(item)

    async def _on_request(self, _rid: Json, method: str, params: Mapping[str, Json]) -> Json:
        match method:
            case "session/request_permission":
                return await self._ask(params)
            case "fs/read_text_file":
                return await acp_files.read_text_file(self._files, params)
            case "fs/write_text_file":
                return await acp_files.write_text_file(self._files, params)
            case _:
                raise RpcError(f"method not supported by corral: {method}", METHOD_NOT_FOUND)

    async def _ask(self, params: Mapping[str, Json]) -> Json:
        cancelled = {"outcome": {"outcome": "cancelled"}}
        run = self._run
        if run is None or run.canceling:
            return cancelled
        options = [o for o in params.get("options") or () if isinstance(o, dict)]
        tool = params.get("toolCall")
        tool = tool if isinstance(tool, dict) else {}
        for item in self._items.map({**tool, "sessionUpdate": "tool_call_update"}):
            self._emit(item)
        request_id = f"{run.turn_id}-permission-{next(self._permission_ids)}"
        raw_input = tool.get("rawInput")
        permission = PendingPermission(
            id=request_id,
            name=self._items.tool_name(str(tool.get("toolCallId", ""))) or "tool",
            kind=str(tool.get("kind", "tool")),
            title=str(tool.get("title", "")),
            input=raw_input if isinstance(raw_input, dict) else {},
            actions=tuple(
                PermissionAction(str(o.get("optionId")), str(o.get("name", "")), str(o.get("kind")))
                for o in options
            ),
            turn_id=run.turn_id,
        )
        answer: asyncio.Future[PermissionResponse] = asyncio.get_running_loop().create_future()
        run.asking[request_id] = answer
        self._emit(ProviderPermissionRequested(run.turn_id, permission))
        try:
            response = await answer
        except asyncio.CancelledError:
            if answer.cancelled():
                return cancelled  # the turn ended or was interrupted
            raise
        finally:
            run.asking.pop(request_id, None)
        option = _chosen_option(options, response)
        if option is None:
            return cancelled
        return {"outcome": {"outcome": "selected", "optionId": option}}


def _resume_method(capabilities: Json) -> str:
    """How this agent reopens a stored session: `session/load` (ACP v1, with a replay corral
    drops) when it offers loadSession, else the unstable `session/resume` when offered."""
    capabilities = capabilities if isinstance(capabilities, dict) else {}
    if capabilities.get("loadSession") is True:
        return "session/load"
    sessions = capabilities.get("sessionCapabilities")
    if isinstance(sessions, dict) and isinstance(sessions.get("resume"), dict):
        return "session/resume"
    raise RequestFailed(
        "the agent cannot reopen a session (it offers neither loadSession nor resume)"
    )


def _chosen_option(options: list[dict[str, Json]], response: PermissionResponse) -> str | None:
    ids = [str(o.get("optionId")) for o in options]
    if response.selected_action_id in ids:
        return response.selected_action_id
    for kind in _OPTION_KINDS[response.behavior]:
        for option in options:
            if option.get("kind") == kind:
                return str(option.get("optionId"))
    return None


def _content_blocks(prompt: Prompt) -> list[dict[str, Json]]:
    blocks: list[dict[str, Json]] = []
    for part in prompt:
        match part:
            case TextPart(text=text):
                blocks.append({"type": "text", "text": text})
            case ImagePart(mime_type=mime, data=data):
                encoded = base64.b64encode(data).decode()
                blocks.append({"type": "image", "mimeType": mime, "data": encoded})
            case _:
                assert_never(part)
    return blocks


def _terminal(run: _Run, result: Json) -> ProviderEvent:
    stop = result.get("stopReason") if isinstance(result, dict) else None
    if stop == CANCELLED:
        return ProviderTurnCanceled(run.turn_id, CANCELLED)
    if stop in ("end_turn", "max_tokens", "max_turn_requests", "refusal"):
        return ProviderTurnCompleted(run.turn_id, _usage(result))
    message = f"the agent ended the prompt with an unknown stop reason {stop!r}"
    return ProviderTurnFailed(run.turn_id, AgentError(message, AGENT_ERROR))


def _usage(result: Json) -> Usage | None:
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    return Usage(
        input_tokens=count("inputTokens"),
        output_tokens=count("outputTokens"),
        cached_input_tokens=count("cachedReadTokens"),
    )
