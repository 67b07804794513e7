"""What the providers that run an agent command share (acp.py, codex.py, claude_code.py).

`CommandProvider` is the provider half: the command and its environment, the name, and
`info()` (available when the command is on the PATH it will run with). `CommandSession` is the
session half: it starts the process and the adapter's handshake, holds the running turn
(`Run`), answers permissions, fences interrupts by turn id, and turns a lost connection into
the turn's end and `ProviderSessionDied`. Each adapter adds only its protocol: the handshake,
how a turn starts and is interrupted, and what the agent's messages mean.

It must never report an event after `close()` returns, and reports exactly one terminal event
per turn the session started.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

from corral_server.clock import Clock
from corral_server.domain.agent import AgentError, PermissionResponse
from corral_server.domain.content import Prompt
from corral_server.errors import AgentBusy, AgentClosed, FailedPrecondition
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderInfo,
    ProviderMode,
    ProviderSessionDied,
    ProviderTurnCanceled,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.providers.connection import (
    EXITED,
    ConnectionLost,
    Framing,
    LineConnection,
    RequestFailed,
)

logger = logging.getLogger(__name__)


class CommandProvider:
    """A provider whose sessions each run `argv` (with `env`) as one agent process."""

    kind: ClassVar[str]
    modes: ClassVar[tuple[ProviderMode, ...]] = ()
    can_steer: ClassVar[bool] = False

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, name: str) -> None:
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
        return ProviderInfo(
            self._name, self.kind, found, reason, modes=self.modes, can_steer=self.can_steer
        )

    def validate_prompt(self, prompt: Prompt) -> None:
        return None  # text and images both map to every agent's input; the agent judges it


def import_config(provider_session_id: str, cwd: str, daemon_tag: str) -> SessionConfig:
    """The config of a session opened only to read stored session `provider_session_id`."""
    return SessionConfig(
        "import", cwd, resume_session_id=provider_session_id, daemon_tag=daemon_tag
    )


def ignore_events(_event: ProviderEvent) -> None:
    return None  # an import's session: nobody listens


@dataclass(slots=True)
class Run:
    """The running turn: set once the session knows its id, until its terminal event."""

    turn_id: str
    canceling: bool = False  # an interrupt was confirmed: the turn ends canceled
    # Permissions the turn waits on, by corral request id: set by the answer.
    asking: dict[str, asyncio.Future[PermissionResponse]] = field(default_factory=dict)

    def ask(self, request_id: str) -> asyncio.Future[PermissionResponse]:
        """A permission the turn now waits on: the future the answer sets (`respond`), listed
        before the adapter emits the request, so an answer can never come too early."""
        answer: asyncio.Future[PermissionResponse] = asyncio.get_running_loop().create_future()
        self.asking[request_id] = answer
        return answer

    async def answer(
        self, request_id: str, answer: asyncio.Future[PermissionResponse]
    ) -> PermissionResponse | None:
        """What `ask`'s request was answered; None if it ended unanswered (the turn ended or
        was interrupted: `stop_asking`). No longer listed after, however it ends."""
        try:
            return await answer
        except asyncio.CancelledError:
            if answer.cancelled():
                return None
            raise
        finally:
            self.asking.pop(request_id, None)

    def stop_asking(self) -> None:
        """Every permission the turn waits on ends unanswered."""
        for answer in self.asking.values():
            if not answer.done():
                answer.cancel()


R = TypeVar("R", bound=Run)


class CommandSession(Generic[R]):
    """One agent process and its running turn; see the module docstring."""

    framing: ClassVar[Framing]
    start_failed: ClassVar[type[FailedPrecondition]]
    cancel_reason: ClassVar[str]  # the reason of a turn that ends canceled

    def __init__(self, config: SessionConfig, sink: EventSink, clock: Clock | None = None):
        self._config = config
        self._sink = sink
        self._clock = clock
        self._conn: LineConnection | None = None
        self._run: R | None = None
        # Set once the session is open: from then on a death is reported to the sink.
        self._ready = False
        self._closed = False

    async def start(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        config, who = self._config, self.framing.who
        try:
            conn = await LineConnection.spawn(
                argv, env, config.cwd, config.daemon_tag, self.framing, self._clock
            )
        except OSError as exc:
            raise self.start_failed(f"cannot start {argv[0] if argv else ''}: {exc}") from exc
        self._conn = conn
        try:
            self._attach(conn)
            await self._handshake()
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, ConnectionLost):  # its message ends with stderr already
                why = f"{who} failed its start: {exc}"
                raise self.start_failed(self._start_failure(why)) from exc
            if isinstance(exc, RequestFailed):
                why = conn.with_stderr(f"{who} failed its start: {exc}")
                raise self.start_failed(self._start_failure(why)) from exc
            raise
        self._ready = True
        if conn.lost is not None:  # it died right after its answer
            self._lost(conn.lost)

    # --- what an adapter adds --------------------------------------------------------------

    def _attach(self, conn: LineConnection) -> None:
        """Put the adapter's protocol on `conn` (which starts reading)."""
        raise NotImplementedError

    async def _handshake(self) -> None:
        """Open the agent's session; `RequestFailed` or `ConnectionLost` fails the start."""
        raise NotImplementedError

    async def _interrupt(self, run: R) -> InterruptResult:
        """Stop `run`, the running turn, not yet canceling."""
        raise NotImplementedError

    def _start_failure(self, reason: str) -> str:
        """Why the start failed, as the caller reads it."""
        return reason

    def _death(self, lost: ConnectionLost) -> AgentError:
        """The error a running turn fails with when the process is gone."""
        return AgentError(str(lost), EXITED)

    def _reports_death(self) -> bool:
        """Whether a loss now is the sink's news (not while nobody listens yet)."""
        return self._ready

    # --- the contract ----------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        raise NotImplementedError

    def _check_idle(self) -> LineConnection:
        """The connection, when a turn may start now; else AgentClosed or AgentBusy."""
        if self._closed or self._conn is None:
            raise AgentClosed(self._config.agent_id)
        if self._run is not None:
            raise AgentBusy(self._config.agent_id, self._run.turn_id)
        return self._conn

    async def interrupt(self, turn_id: str) -> InterruptResult:
        run = self._run
        if run is None or (turn_id and run.turn_id != turn_id) or self._conn is None:
            return InterruptResult.NOT_RUNNING  # fenced: never stop a turn it was not meant for
        if run.canceling:
            return InterruptResult.CONFIRMED
        return await self._interrupt(run)

    async def respond_permission(
        self, turn_id: str, request_id: str, response: PermissionResponse
    ) -> None:
        run = self._run
        answer = run.asking.get(request_id) if run is not None and run.turn_id == turn_id else None
        if answer is None or answer.done():
            raise FailedPrecondition(f"turn {turn_id!r} is not waiting for {request_id!r}")
        answer.set_result(response)

    async def close(self) -> None:
        self._closed = True
        run, self._run = self._run, None
        if run is not None:
            run.stop_asking()
        if self._conn is not None:
            await self._conn.close()

    # --- endings ---------------------------------------------------------------------------

    def _emit(self, event: ProviderEvent) -> None:
        if not self._closed:
            self._sink(event)

    def _end(self, run: R, terminal: ProviderEvent) -> None:
        """Report `run`'s terminal event, once: a turn that ended already is left alone."""
        if self._run is not run:
            return
        self._run = None
        run.stop_asking()
        try:
            self._emit(terminal)
        except Exception:
            logger.exception("sink raised on the terminal event of turn %s", run.turn_id)

    def _lost(self, lost: ConnectionLost) -> None:
        """The process died outside `close()` (which silences this): a running turn ends
        (canceled when an interrupt was confirmed, else failed), then the death is reported.
        During the handshake nobody listens yet: the start fails with the reason instead."""
        logger.warning("%s of %s is gone: %s", self.framing.who, self._config.agent_id, lost)
        run = self._run
        if run is not None:
            canceled = ProviderTurnCanceled(run.turn_id, self.cancel_reason)
            failed = ProviderTurnFailed(run.turn_id, self._death(lost))
            self._end(run, canceled if run.canceling else failed)
        if self._reports_death():
            self._emit(ProviderSessionDied(str(lost)))
