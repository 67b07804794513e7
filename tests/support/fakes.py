"""Shared fakes for unit tests: a provider whose every move the test controls, and a publisher
that records what the manager broadcasts.

`FakeProvider` / `FakeSession` implement providers/base.py's `Provider` / `ProviderSession`.
The test decides when a session starts (`FakeProvider.hold_create`), when `start_turn` and
`close` return (`FakeSession.hold_start`, `hold_close`), what `interrupt` does
(`interrupt_behaviour`) and whether `close` raises (`close_error`); it reports any
`ProviderEvent` at any moment with `FakeSession.emit`, including while `create_session` or
`start_turn` is still waiting.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, TypeVar

from corral_server.domain.agent import Agent, AgentId, Idle, PermissionResponse
from corral_server.domain.content import Prompt
from corral_server.domain.events import Event, RowAppended
from corral_server.domain.timeline import TimelineRow
from corral_server.hub import Prepared
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderInfo,
    ProviderMode,
    ProviderModel,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.rpc.convert import encode_event
from corral_server.timeline.store import NewRow

if TYPE_CHECKING:
    from corral_server.providers.base import Provider, ProviderSession

E = TypeVar("E")
TERMINAL = (ProviderTurnCompleted, ProviderTurnFailed, ProviderTurnCanceled)


class _Recorded(Prepared):
    """A prepared event that keeps its domain event too: the fake records domain events."""

    event: Event


def _recorded(prepared: Prepared) -> Event:
    assert isinstance(prepared, _Recorded), "prepared by another publisher"
    return prepared.event


# What `FakeSession.interrupt` does for the running turn: answer CONFIRMED (True) or REFUSED
# (False), hang until canceled, or raise. An interrupt for another turn is NOT_RUNNING, like
# every provider's (the fence of providers/base.py).
InterruptBehaviour = bool | Literal["hang"] | Exception


class FakeSession:
    """One provider session. Turn ids are `turn-1`, `turn-2`, ... in start order."""

    def __init__(self, config: SessionConfig, sink: EventSink, session_id: str) -> None:
        self.config = config
        self.sink = sink
        self._session_id = session_id
        self.calls: list[str] = []  # "start_turn", "interrupt", "close", in call order
        self.interrupted: list[str] = []  # the turn id of each interrupt, in call order
        # The turn the session runs: set by start_turn, cleared by a terminal event for it.
        self.current_turn: str | None = None
        self._interrupt_gate: asyncio.Event | None = None
        self.prompts: list[Prompt] = []
        self._turn_numbers = itertools.count(1)
        self.start_entered = asyncio.Event()  # set when start_turn is called
        self._start_gate: asyncio.Event | None = None
        self.start_error: Exception | None = None  # raised by start_turn (after its gate)
        self.interrupt_behaviour: InterruptBehaviour = True
        self.can_steer = False  # mirrors FakeProvider.can_steer
        self.interrupt_entered = asyncio.Event()
        # Reported through the sink while `interrupt` runs, before it returns.
        self.on_interrupt: list[ProviderEvent] = []
        self.steered: list[tuple[str, Prompt]] = []
        # (turn id, request id, answer) of each respond_permission; respond_error raises.
        self.responses: list[tuple[str, str, PermissionResponse]] = []
        self.respond_error: Exception | None = None  # (turn id, prompt) of each steer taken
        self.close_error: Exception | None = None
        self.close_entered = asyncio.Event()
        self._close_gate: asyncio.Event | None = None
        self.closed = False

    @property
    def session_id(self) -> str:
        return self._session_id

    # --- test controls ---------------------------------------------------------------------

    def emit(self, *events: ProviderEvent) -> None:
        """Report events through the manager's sink, now."""
        for event in events:
            if isinstance(event, TERMINAL) and event.turn_id in ("", self.current_turn):
                self.current_turn = None
            self.sink(event)

    def hold_start(self) -> asyncio.Event:
        """Make the next `start_turn` calls wait until the returned event is set."""
        self._start_gate = asyncio.Event()
        return self._start_gate

    def hold_interrupt(self) -> asyncio.Event:
        """Make `interrupt` wait, once entered, until the returned event is set: the interrupt
        is "in flight" while the test changes the world."""
        self._interrupt_gate = asyncio.Event()
        return self._interrupt_gate

    def hold_close(self) -> asyncio.Event:
        """Make `close` wait until the returned event is set."""
        self._close_gate = asyncio.Event()
        return self._close_gate

    # --- ProviderSession -------------------------------------------------------------------

    async def start_turn(self, prompt: Prompt) -> str:
        self.calls.append("start_turn")
        self.prompts.append(prompt)
        turn_id = f"turn-{next(self._turn_numbers)}"
        self.start_entered.set()
        if self._start_gate is not None:
            await self._start_gate.wait()
        if self.start_error is not None:
            raise self.start_error
        self.current_turn = turn_id
        return turn_id

    async def interrupt(self, turn_id: str) -> InterruptResult:
        self.calls.append("interrupt")
        self.interrupted.append(turn_id)
        self.interrupt_entered.set()
        if self._interrupt_gate is not None:
            await self._interrupt_gate.wait()
        if self.current_turn is None or (turn_id and turn_id != self.current_turn):
            return InterruptResult.NOT_RUNNING
        self.emit(*self.on_interrupt)
        behaviour = self.interrupt_behaviour
        if behaviour == "hang":
            await asyncio.Event().wait()  # until the caller gives up and cancels us
        if isinstance(behaviour, Exception):
            raise behaviour
        return InterruptResult.CONFIRMED if behaviour else InterruptResult.REFUSED

    async def respond_permission(
        self, turn_id: str, request_id: str, response: PermissionResponse
    ) -> Prompt | None:
        self.calls.append("respond_permission")
        self.responses.append((turn_id, request_id, response))
        if self.respond_error is not None:
            raise self.respond_error
        return None  # no follow-up prompt

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        self.calls.append("steer")
        if turn_id != self.current_turn or not self.can_steer:
            return False
        self.steered.append((turn_id, prompt))
        return True

    async def close(self) -> None:
        self.calls.append("close")
        self.close_entered.set()
        if self._close_gate is not None:
            await self._close_gate.wait()
        self.closed = True
        if self.close_error is not None:
            raise self.close_error


class FakeProvider:
    """A provider whose sessions are `FakeSession`s, kept in `sessions` in creation order."""

    def __init__(
        self,
        name: str = "fake",
        *,
        modes: tuple[ProviderMode, ...] = (ProviderMode("default", "Default"),),
        models: tuple[ProviderModel, ...] = (ProviderModel("fake-1", "Fake 1"),),
    ) -> None:
        self._name = name
        self._modes = modes
        self._models = models
        self.sessions: list[FakeSession] = []
        self.configs: list[SessionConfig] = []
        self.validated: list[Prompt] = []
        self.prompt_error: Exception | None = None  # raised by validate_prompt when set
        self.can_steer = False  # ProviderInfo.can_steer, and what its sessions do
        self.create_error: Exception | None = None  # raised by create_session when set
        self.create_entered = asyncio.Event()
        self._create_gate: asyncio.Event | None = None
        # Called with each new session before create_session returns (e.g. to emit events).
        self.on_create: Callable[[FakeSession], None] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def session(self) -> FakeSession:
        """The newest session."""
        return self.sessions[-1]

    def hold_create(self) -> asyncio.Event:
        """Make `create_session` wait (after creating its session) until the event is set."""
        self._create_gate = asyncio.Event()
        return self._create_gate

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            self._name,
            "fake",
            True,
            modes=self._modes,
            models=self._models,
            can_steer=self.can_steer,
        )

    def validate_prompt(self, prompt: Prompt) -> None:
        self.validated.append(prompt)
        if self.prompt_error is not None:
            raise self.prompt_error

    async def create_session(self, config: SessionConfig, sink: EventSink) -> FakeSession:
        self.configs.append(config)
        if self.create_error is not None:
            raise self.create_error
        session = FakeSession(config, sink, f"session-{len(self.sessions) + 1}")
        session.can_steer = self.can_steer
        self.sessions.append(session)
        if self.on_create is not None:
            self.on_create(session)
        self.create_entered.set()
        if self._create_gate is not None:
            await self._create_gate.wait()
        return session


class RecordingPublisher:
    """Records every published domain event with the revision it was given (1, 2, ...).
    `prepare` runs the real encoder (rpc/convert.encode_event), so an event that cannot be
    encoded fails where it would in the daemon: before the store step. `fail_prepare` makes
    `prepare` raise for events the test picks."""

    joint_commits = False  # publishes at commit, like the in-memory hub

    def discard(self, first: int, last: int) -> None:
        raise AssertionError("only a hub with joint commits discards")

    def __init__(self) -> None:
        self.published: list[tuple[int, Event]] = []
        # How many events each commit or commit_many call published, in call order.
        self.batch_sizes: list[int] = []
        self.fail_prepare: Callable[[Event], bool] = lambda event: False

    def prepare(self, event: Event) -> Prepared:
        if self.fail_prepare(event):
            raise ValueError("cannot encode this event (test)")
        recorded = _Recorded("", encode_event(0, event))
        recorded.event = event
        return recorded

    def prepare_rows(
        self, agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
    ) -> tuple[list[Prepared], list[bytes] | None]:
        """Each row's RowAppended through `prepare` (so `fail_prepare` sees it); no items:
        the store encodes them itself."""
        events = [
            self.prepare(
                RowAppended(agent_id, epoch, TimelineRow(first_seq + i, t, item, turn, pm))
            )
            for i, (item, t, turn, pm, _) in enumerate(rows)
        ]
        return events, None

    def commit(self, prepared: Prepared) -> int:
        revision = len(self.published) + 1
        self.published.append((revision, _recorded(prepared)))
        self.batch_sizes.append(1)
        return revision

    def commit_many(self, prepared: Sequence[Prepared]) -> int:
        for one in prepared:
            self.published.append((len(self.published) + 1, _recorded(one)))
        self.batch_sizes.append(len(prepared))
        return len(self.published)

    def publish(self, event: Event) -> int:
        return self.commit(self.prepare(event))

    @property
    def events(self) -> list[Event]:
        return [event for _, event in self.published]

    def of_type(self, kind: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, kind)]

    def mark(self) -> int:
        """A position in the record; `since(mark)` returns what was published after it."""
        return len(self.published)

    def since(self, mark: int) -> list[Event]:
        return [event for _, event in self.published[mark:]]


if TYPE_CHECKING:

    def _provider(p: FakeProvider) -> Provider:
        return p  # mypy proves FakeProvider implements Provider

    def _session(s: FakeSession) -> ProviderSession:
        return s


def idle_agent(agent_id: str) -> Agent:
    """A plain idle agent snapshot, for tests of readers (hub, conversion)."""
    return Agent(
        id=AgentId(agent_id),
        provider="scripted",
        cwd="/work",
        lifecycle=Idle(),
        created_at_ms=0,
        updated_at_ms=0,
        epoch="e1",
        next_seq=1,
    )
