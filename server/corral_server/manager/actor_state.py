"""What the parts of an agent's actor share (actor.py is the whole; actor_*.py its parts):
the dependencies, the tuned constants, and `ActorState`, which declares the state the single
writer owns and the steps the parts call each other through. Nothing here runs on its own."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TypeVar

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    QueuedBy,
    QueuedPrompt,
)
from corral_server.domain.content import Prompt
from corral_server.hub import Prepared
from corral_server.jobs import JobQueue
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.actor_history import HistoryKeeper
from corral_server.manager.actor_permissions import PermissionDesk
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.agent_state import AgentState
from corral_server.manager.echo_book import EchoBook
from corral_server.manager.turn_book import TurnBook
from corral_server.manager.turns import (
    ActiveTurn,
    IfRunning,
    StartedTurn,
)
from corral_server.manager.writer import TimelineWriter
from corral_server.providers.base import (
    ProviderEvent,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Prompts one agent may hold queued (each up to a prompt's size limit).
MAX_QUEUED_PROMPTS = 32
PROVIDER_TIMEOUT = errors.ProviderTimeout.reason


class ActorState(ABC):
    """The single writer's state (see actor.py for each field's invariant) and the steps
    shared between the actor's parts; `AgentActor` implements every one of them."""

    _agent_id: str
    _state: AgentState
    _deps: ActorDeps
    _writer: TimelineWriter
    _sessions: SessionKeeper
    _jobs: JobQueue
    _turns: TurnBook
    _echoes: EchoBook
    _permissions: PermissionDesk
    _history: HistoryKeeper

    @property
    @abstractmethod
    def agent(self) -> Agent: ...

    @abstractmethod
    async def start_turn(
        self,
        prompt: Prompt,
        client_message_id: str,
        if_running: IfRunning,
        queued_by: QueuedBy = QueuedBy.CLIENT,
    ) -> StartedTurn: ...

    @abstractmethod
    def open_handoff(self) -> str | None: ...

    @abstractmethod
    async def close_handoff(self) -> None: ...

    @abstractmethod
    def _on_provider_event(self, event: ProviderEvent) -> None: ...

    @abstractmethod
    async def register(self, model: str, mode: str) -> Agent: ...

    @abstractmethod
    def _begin(
        self, active: ActiveTurn, queued: tuple[QueuedPrompt, ...] | None = None
    ) -> Prepared: ...

    @abstractmethod
    async def _start(
        self, prompt: Prompt, client_message_id: str, queued_after: tuple[QueuedPrompt, ...]
    ) -> str: ...

    @abstractmethod
    async def _finish(self, active: ActiveTurn, terminal: ev.TurnTerminal) -> None: ...
