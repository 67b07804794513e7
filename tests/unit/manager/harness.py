"""An AgentManager wired to fakes (provider, publisher, clock) and the in-memory timeline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral_server.clock import FakeClock, TimerHandle
from corral_server.domain.agent import Agent, Lifecycle
from corral_server.domain.content import Prompt, TextPart
from corral_server.domain.events import AgentUpserted
from corral_server.domain.timeline import Direction, TimelineItem, TimelineRow
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import CreateSpec, Timeouts
from corral_server.manager.turns import IfRunning
from corral_server.timeline.memory import InMemoryTimelineStore
from tests.support.fakes import FakeProvider, FakeSession, RecordingPublisher

# Short cancel waits; tests move the FakeClock past them.
TIMEOUTS = Timeouts(interrupt_s=1.0, settle_s=2.0)
INTERRUPT_MS = 1000
SETTLE_MS = 2000
PROMPT: Prompt = (TextPart("hello"),)


class SpyClock(FakeClock):
    """A FakeClock that remembers every wait armed on it (seconds), so a test can tell the
    manager is waiting on a particular timeout before it moves time."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: list[float] = []

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        self.armed.append(seconds)
        return super().call_later(seconds, callback)

    async def armed_wait(self, seconds: float) -> None:
        """Return once a wait of `seconds` has been armed (since the last call)."""
        await until(lambda: seconds in self.armed)
        self.armed.remove(seconds)


@dataclass
class World:
    cwd: str
    clock: SpyClock = field(default_factory=SpyClock)
    provider: FakeProvider = field(default_factory=FakeProvider)
    publisher: RecordingPublisher = field(default_factory=RecordingPublisher)
    timeline: InMemoryTimelineStore = field(default_factory=InMemoryTimelineStore)
    manager: AgentManager = field(init=False)

    def __post_init__(self) -> None:
        ids = iter(f"agent-{n}" for n in range(1, 1000))
        self.manager = AgentManager(
            providers={"fake": self.provider},
            timeline=self.timeline,
            publisher=self.publisher,
            clock=self.clock,
            timeouts=TIMEOUTS,
            new_id=lambda: next(ids),
        )

    def spec(self, **changes: Any) -> CreateSpec:
        return CreateSpec(provider="fake", cwd=self.cwd, **changes)

    async def create(self, **changes: Any) -> Agent:
        agent, _ = await self.manager.create(self.spec(**changes))
        return agent

    async def started(self) -> tuple[Agent, FakeSession]:
        """An agent running its first foreground turn, `turn-1`."""
        agent = await self.create()
        await self.manager.send_prompt(agent.id, PROMPT, "cm-1", IfRunning.REJECT)
        return self.manager.get(agent.id), self.provider.session

    async def drained(self, agent_id: str) -> Agent:
        """Wait until the agent's actor has processed everything queued so far (the events
        a test emitted, fired timers) and return the agent. The actor's serial queue is the
        only barrier that proves a dropped event was really looked at."""

        async def nothing() -> None:
            return None

        await self.manager.directory.actors[agent_id].call(nothing)
        return self.manager.get(agent_id)

    async def rows(self, agent_id: str) -> list[TimelineRow]:
        page = await self.manager.reads.fetch_timeline(agent_id, Direction.TAIL, None, 0)
        return list(page.rows)

    async def items(self, agent_id: str) -> list[TimelineItem]:
        return [row.item for row in await self.rows(agent_id)]

    def lifecycles(self, agent_id: str) -> list[Lifecycle]:
        return [
            e.agent.lifecycle
            for e in self.publisher.of_type(AgentUpserted)
            if e.agent.id == agent_id
        ]


async def until(condition: Callable[[], bool], rounds: int = 200) -> None:
    """Yield to the event loop until `condition` holds (no wall-clock sleeping)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")
