"""One codex session: one `codex app-server` process and one codex thread.

This module owns the mapping between the app-server protocol and the provider contract:
`initialize` / `initialized` and `thread/start` (or `thread/resume` of
`SessionConfig.resume_session_id`, or a fork of it: `codex_threads.py`) make the session, whose
id is the thread id; `turn/start`
is a turn and codex's turn id is corral's; `turn/completed` ends it (completed, interrupted,
failed: `codex_turns.py`); `turn/interrupt` (fenced by the turn id) is an interrupt;
`turn/steer` takes a prompt into the running turn; item notifications become timeline items
(`codex_items.py`); command and file-change approval requests become corral permissions
(`codex_approvals.py`). JSON-RPC (without its "jsonrpc" member, one message per line) lives in
`jsonrpc.py` over the process connection of `connection.py`, with a deadline on every request;
the session's lifecycle in `command.py`. It must never report an event after `close()`
returns, and reports exactly one terminal event per turn it started.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Awaitable, Sequence
from typing import cast

from corral_server.clock import Clock
from corral_server.domain.agent import AgentError, PermissionResponse
from corral_server.domain.content import Prompt
from corral_server.domain.timeline import JsonValue
from corral_server.errors import AgentBusy, FailedPrecondition
from corral_server.providers import codex_approvals as approvals
from corral_server.providers import codex_protocol as protocol
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderMode,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderSessionDied,
    ProviderSettings,
    ProviderTitle,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.codex_items import ItemMapper
from corral_server.providers.codex_threads import thread_request
from corral_server.providers.codex_turns import (
    AGENT_ERROR,
    AGENT_TIMEOUT,
    INTERRUPTED,
    Run,
    agent_error,
    terminal,
    turn_overrides,
    user_input,
)
from corral_server.providers.command import CommandSession
from corral_server.providers.connection import (
    ConnectionLost,
    Framing,
    LineConnection,
    RequestFailed,
    RequestTimeout,
)
from corral_server.providers.jsonrpc import METHOD_NOT_FOUND, JsonRpc, Params, RpcError
from corral_server.providers.live import SettingsChange, SettingsRefused

logger = logging.getLogger(__name__)

# After stdin closes, how long codex may take to exit on its own (measured: ~50 ms). Codex
# writes nothing but protocol lines to stdout: any other line breaks the connection.
FRAMING = Framing(who="codex", label="codex", strict=True, eof_grace_s=0.5)

# Modes: codex's approval policy and sandbox for the thread. The first is the default.
MODES = (
    ProviderMode(
        "untrusted", "Ask first", "ask before any command not known to be read-only; sandboxed"
    ),
    ProviderMode("on-request", "On request", "the model asks when it needs to leave the sandbox"),
    ProviderMode("read-only", "Read only", "a read-only sandbox; the model asks for more"),
    ProviderMode("full-access", "Full access", "no sandbox, never asks"),
)
_POLICIES: dict[str, tuple[str, protocol.SandboxMode]] = {
    "untrusted": ("untrusted", "workspace-write"),
    "on-request": ("on-request", "workspace-write"),
    "read-only": ("on-request", "read-only"),
    "full-access": ("never", "danger-full-access"),
}
# Notifications corral never uses: codex need not send them.
_OPT_OUT = (
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "account/rateLimits/updated",
    "thread/status/changed",
    "turn/diff/updated",
)


class CodexStartFailed(FailedPrecondition):
    """codex did not start, failed its handshake, or could not open (or resume) the thread."""


class CodexSession(CommandSession[Run]):
    framing = FRAMING
    start_failed = CodexStartFailed
    cancel_reason = INTERRUPTED

    def __init__(
        self,
        config: SessionConfig,
        sink: EventSink,
        clock: Clock,
        timeout_s: float,
        *,
        fork_before_turn: str = "",
    ):
        super().__init__(config, sink, clock)
        self._timeout_s = timeout_s
        # Set: the session is a fork of thread `config.resume_session_id` before this turn
        # (`thread/fork`), a new thread of its own (ForkAgent: docs/design.md#forks).
        self._fork_before_turn = fork_before_turn
        self._rpc: JsonRpc | None = None
        self._thread_id = ""
        # While turn/start waits for codex's answer, that turn's notifications wait here.
        self._starting = False
        self._early: list[tuple[str, Params]] = []
        self._started = asyncio.Event()  # set whenever no turn/start is in flight
        self._started.set()
        # Approval requests codex settled before corral was asked (serverRequest/resolved
        # that came while turn/start was in flight): they are never asked. Per turn.
        self._settled: set[int | str] = set()
        self._items = ItemMapper()
        self._permission_ids = itertools.count(1)
        # The thread `thread/resume` answered (with its turns and items), for an import.
        self.resumed_thread: protocol.Thread | None = None
        # A live model or mode change, sent with the next turn/start (codex keeps it after).
        self._overrides: dict[str, JsonValue] = {}

    @property
    def session_id(self) -> str:
        return self._thread_id

    def _attach(self, conn: LineConnection) -> None:
        self._rpc = JsonRpc(
            conn, self._on_request, self._on_notification, self._lost, version_member=False
        )

    def _death(self, lost: ConnectionLost) -> AgentError:
        return AgentError(str(lost), lost.code)  # died, or broke the framing

    def _reports_death(self) -> bool:
        return self._ready and not self._starting  # a turn/start in flight reports it itself

    async def _handshake(self) -> None:
        conn = self._rpc
        assert conn is not None
        capabilities: protocol.InitializeCapabilities = {
            "optOutNotificationMethods": list(_OPT_OUT)
        }
        if self._fork_before_turn:  # `beforeTurnId` is one of codex's experimental fields
            capabilities["experimentalApi"] = True
        init: protocol.InitializeParams = {
            "clientInfo": {"name": "corral", "title": "corral", "version": "0.1.0"},
            "capabilities": capabilities,
        }
        await conn.request("initialize", init, self._timeout_s)
        await conn.notify("initialized")
        config = self._config
        approval, sandbox = _POLICIES.get(config.mode or MODES[0].id, _POLICIES[MODES[0].id])
        method, params = thread_request(config, approval, sandbox, self._fork_before_turn)
        answer = await conn.request(method, params, self._timeout_s)
        made = cast(protocol.ThreadStartResponse, answer)  # thread/resume answers the same
        thread = made.get("thread") if isinstance(made, dict) else None
        thread_id = thread.get("id") if isinstance(thread, dict) else None
        if not isinstance(thread_id, str) or not thread_id:
            raise RequestFailed(f"codex answered without a thread id: {made!r:.300}")
        resumed = config.resume_session_id and not self._fork_before_turn
        if resumed and thread_id != config.resume_session_id:
            raise RequestFailed(f"codex resumed thread {thread_id}, not {config.resume_session_id}")
        self._thread_id = thread_id
        if resumed and isinstance(thread, dict):
            self.resumed_thread = thread

    # --- turns -----------------------------------------------------------------------------

    async def start_turn(self, prompt: Prompt) -> str:
        conn = self._check_idle()
        if self._starting:
            raise AgentBusy(self._config.agent_id, "")
        assert self._rpc is not None
        params: protocol.TurnStartParams = {
            "threadId": self._thread_id,
            "input": user_input(prompt),
        }
        params.update(cast(protocol.TurnStartParams, self._overrides))
        self._starting, self._early, self._settled = True, [], set()
        self._started.clear()
        try:
            answer = await self._rpc.request("turn/start", params, self._timeout_s)
        except ConnectionLost as exc:
            failed_id = self._failed_start(AgentError(str(exc), exc.code))
            self._emit(ProviderSessionDied(str(exc)))  # `_lost` left it to us
            return failed_id
        except RequestTimeout as exc:
            return self._failed_start(AgentError(str(exc), AGENT_TIMEOUT))
        except RequestFailed as exc:
            return self._failed_start(AgentError(f"codex refused the turn: {exc}", AGENT_ERROR))
        finally:
            self._starting = False
            self._started.set()  # an approval that came early looks for the run once it yields
        result = cast(protocol.TurnStartResponse, answer)
        turn = result.get("turn") if isinstance(result, dict) else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        if not isinstance(turn_id, str) or not turn_id:
            message = f"codex answered turn/start without a turn id: {result!r:.300}"
            return self._failed_start(AgentError(message, AGENT_ERROR))
        run = Run(turn_id)
        self._run = run
        self._items.start_turn(turn_id)
        self._emit(ProviderTurnStarted(turn_id))
        early, self._early = self._early, []
        for method, early_params in early:  # what codex sent before its answer, in order
            self._on_notification(method, early_params)
        if conn.lost is not None:  # lost right after its answer, before the run was set
            self._lost(conn.lost)
        return turn_id

    async def change_settings(self, change: SettingsChange) -> None:
        """Codex takes model, approval policy and sandbox per turn (`turn/start`, kept for
        the turns after): the change goes with the next turn."""
        if change.model == "":
            raise SettingsRefused("codex needs a model by name; it has no 'default' to go back to")
        policy = None if change.mode is None else _POLICIES[change.mode or MODES[0].id]
        self._overrides.update(turn_overrides(change.model, policy))
        self._emit(ProviderSettings(change.model, change.mode))

    def _failed_start(self, error: AgentError) -> str:
        """A turn codex never ran: it starts and fails at once, so the agent shows why."""
        turn_id = f"turn-{uuid.uuid4().hex}"
        self._emit(ProviderTurnStarted(turn_id))
        self._emit(ProviderTurnFailed(turn_id, error))
        return turn_id

    async def _interrupt(self, run: Run) -> InterruptResult:
        assert self._rpc is not None
        run.canceling = True
        confirmed = False
        try:
            params: protocol.TurnInterruptParams = {
                "threadId": self._thread_id,
                "turnId": run.turn_id,
            }
            await self._rpc.request("turn/interrupt", params, self._timeout_s)
            confirmed = True
        except ConnectionLost:
            confirmed = True  # the turn ends canceled with the process
        except RequestFailed as exc:
            if self._run is not run:
                return InterruptResult.NOT_RUNNING  # it ended before codex took the interrupt
            logger.warning("codex refused to interrupt turn %s: %s", run.turn_id, exc)
            return InterruptResult.REFUSED
        finally:
            if not confirmed:
                run.canceling = False
        run.stop_asking()  # answered "cancel": the turn stops anyway
        return InterruptResult.CONFIRMED

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        run, conn = self._run, self._rpc
        if run is None or run.turn_id != turn_id or run.canceling or conn is None:
            return False
        params: protocol.TurnSteerParams = {
            "threadId": self._thread_id,
            "expectedTurnId": turn_id,
            "input": user_input(prompt),
        }
        try:
            await conn.request("turn/steer", params, self._timeout_s)
        except (RequestFailed, ConnectionLost) as exc:
            logger.info("codex did not take a steer into turn %s: %s", turn_id, exc)
            return False
        return True

    # --- from codex ------------------------------------------------------------------------

    def _on_notification(self, method: str, params: Params) -> None:
        thread_id = params.get("threadId")
        if thread_id is not None and thread_id != self._thread_id:
            return  # another thread's news (none is opened on this connection today)
        run = self._run
        if method == "thread/name/updated":  # thread-wide: the conversation's name
            name = cast(protocol.ThreadNameUpdatedNotification, params).get("threadName")
            if isinstance(name, str) and name.strip():
                self._emit(ProviderTitle(name))
            return
        if method == "serverRequest/resolved":  # carries no turn id
            resolved = cast(protocol.ServerRequestResolvedNotification, params)
            self._resolved(run, resolved.get("requestId"))
            return
        turn_id = params.get("turnId")
        if turn_id is None and isinstance(turn := params.get("turn"), dict):
            turn_id = turn.get("id")
        if run is None or turn_id != run.turn_id:
            if self._starting and isinstance(turn_id, str):
                self._early.append((method, params))
            return  # a turn that ended, or thread-wide news: nothing for the timeline
        match method:
            case "turn/completed":
                ended = cast(protocol.TurnCompletedNotification, params).get("turn")
                self._end(run, terminal(run, ended if isinstance(ended, dict) else None))
            case "thread/tokenUsage/updated":
                usage = cast(protocol.ThreadTokenUsageUpdatedNotification, params)
                run.usage.update(usage.get("tokenUsage"))
            case "error":
                error = cast(protocol.ErrorNotification, params)
                if error.get("willRetry") is not True:
                    run.error = agent_error(error.get("error"))
            case _:
                for item in self._items.map(method, params):
                    self._emit(item)

    def _resolved(self, run: Run | None, rpc_id: JsonValue) -> None:
        """Codex settled an approval itself (the turn was interrupted, say): corral's
        pending permission ends unanswered. An echo of corral's own answer finds it done."""
        if not isinstance(rpc_id, int | str):
            return
        request_id = run.by_rpc_id.get(rpc_id) if run is not None else None
        if run is None or request_id is None:
            self._settled.add(rpc_id)  # its handler has not asked corral yet: it never will
            return
        answer = run.asking.get(request_id)
        if answer is None or answer.done():
            return
        answer.cancel()
        self._emit(ProviderPermissionResolved(run.turn_id, request_id))

    def _on_request(self, rpc_id: JsonValue, method: str, params: Params) -> Awaitable[JsonValue]:
        """Called in line order (see jsonrpc.RequestHandler): an approval is registered,
        and corral asked, before codex's next line is read."""
        if method not in (approvals.COMMAND_APPROVAL, approvals.FILE_CHANGE_APPROVAL):
            error = RpcError(f"method not supported by corral: {method}", METHOD_NOT_FOUND)
            return _raising(error)
        if self._starting:
            return self._approve_once_started(rpc_id, method, params)
        return self._approve(rpc_id, method, params)

    async def _approve_once_started(
        self, rpc_id: JsonValue, method: str, params: Params
    ) -> JsonValue:
        await self._started.wait()  # asked before codex's answer to turn/start came in
        return await self._approve(rpc_id, method, params)

    def _approve(self, rpc_id: JsonValue, method: str, params: Params) -> Awaitable[JsonValue]:
        run = self._run
        if run is None or params.get("turnId") != run.turn_id:
            return _answered({"decision": "decline"})  # not the running turn: nobody could
        key = rpc_id if isinstance(rpc_id, int | str) else None
        if run.canceling or key in self._settled:
            return _answered({"decision": "cancel"})
        decisions = approvals.offered(method, params)
        request_id = f"{run.turn_id}-permission-{next(self._permission_ids)}"
        item_id = params.get("itemId")
        call = self._items.tool_call(item_id) if isinstance(item_id, str) else None
        permission = approvals.permission(request_id, run.turn_id, method, params, call, decisions)
        answer = run.ask(request_id)
        if key is not None:
            run.by_rpc_id[key] = request_id
        self._emit(ProviderPermissionRequested(run.turn_id, permission))
        return self._decide(run, key, request_id, answer, decisions)

    async def _decide(
        self,
        run: Run,
        key: int | str | None,
        request_id: str,
        answer: asyncio.Future[PermissionResponse],
        decisions: Sequence[JsonValue],
    ) -> JsonValue:
        try:
            response = await run.answer(request_id, answer)
        finally:
            run.by_rpc_id.pop(key, None)
        if response is None:  # the turn ended, was interrupted, or codex settled it
            return {"decision": "cancel"}
        return {"decision": approvals.decision(decisions, response)}


async def _answered(result: JsonValue) -> JsonValue:
    return result


async def _raising(error: Exception) -> JsonValue:
    raise error
