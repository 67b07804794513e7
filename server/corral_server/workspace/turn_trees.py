"""What each agent's working tree was at its turns' edges, and `changes_updated` after each turn.

The manager's events pass through `WatchedPublisher` on their way to the hub; this module sees
turn starts and ends there and, for each agent:

1. at a turn's end, captures the working tree (trees.py's snapshot, in a task: git runs off
   the event loop) and publishes `ChangesUpdated` with the counts of what differs from the
   agent's base;
2. at a turn's start, remembers the capture of the previous turn's end as "before this turn"
   (no git call: the start is never delayed). The first turn an agent runs under this daemon
   has no earlier capture; one is taken as the turn starts (so an edit in its first moments
   can be counted as before it).

An agent whose cwd is in no git repository gets no capture and no event, and is not looked
at again while this daemon runs (a look at its directories, no git process: trees.py).

Must not: delay an event (observing is a dictionary update and a task at most), or hold more
than two tree ids per agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from corral_server.domain.agent import Agent
from corral_server.domain.events import (
    AgentRemoved,
    ChangesUpdated,
    Event,
    TurnCanceled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from corral_server.domain.workspace import FileChange
from corral_server.errors import CorralError
from corral_server.hub import Prepared
from corral_server.timeline.store import NewRow
from corral_server.workspace.errors import NotARepository
from corral_server.workspace.trees import Trees, base_of

log = logging.getLogger(__name__)

Tree = asyncio.Future[str | None]  # a capture's tree id; None when there is none


class TurnTrees:
    def __init__(
        self,
        trees: Trees,
        agent_of: Callable[[str], Agent],
        publish: Callable[[Event], object],
    ) -> None:
        self.trees = trees
        self._agent_of = agent_of
        self._publish = publish
        self._before: dict[str, Tree] = {}  # the tree before the agent's last turn
        self._after: dict[str, Tree] = {}  # the tree when its last turn ended
        self._tasks: set[asyncio.Task[str | None]] = set()
        self._no_repository: set[str] = set()  # agents whose cwd is in none

    def observe(self, event: Event) -> None:
        match event:
            case TurnStarted(agent_id=agent_id):
                after = self._after.get(agent_id)
                self._before[agent_id] = after or self._spawn(self._capture(agent_id, False))
            case TurnCompleted() | TurnFailed() | TurnCanceled():
                self._after[event.agent_id] = self._spawn(self._capture(event.agent_id, True))
            case AgentRemoved(agent_id=agent_id):
                self._before.pop(agent_id, None)
                self._after.pop(agent_id, None)
                self._no_repository.discard(agent_id)
            case _:
                pass

    async def before_last_turn(self, agent_id: str) -> str | None:
        """The tree before the agent's last (or running) turn; None when this daemon saw no
        turn of it start."""
        tree = self._before.get(agent_id)
        return None if tree is None else await asyncio.shield(tree)

    async def settled(self) -> None:
        """Every capture started so far has finished (tests; shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, capture: Coroutine[Any, Any, str | None]) -> Tree:
        task = asyncio.get_running_loop().create_task(capture)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _capture(self, agent_id: str, announce: bool) -> str | None:
        if agent_id in self._no_repository:
            return None
        try:
            agent = self._agent_of(agent_id)
            top = await self.trees.top_level(agent.cwd)
            tree = await self.trees.snapshot(top)
            if announce:
                base = await base_of(self.trees.git, agent.workspace, top)
                files = await self.trees.changes(top, base, tree)
                self._publish(_counts(agent_id, files))
            return tree
        except NotARepository:
            self._no_repository.add(agent_id)
            return None
        except CorralError as exc:  # gone, git refused: nothing to say
            log.debug("agent %s: no capture of its tree: %s", agent_id, exc.message)
            return None
        except Exception:
            log.warning("agent %s: capturing its tree failed", agent_id, exc_info=True)
            return None


def _counts(agent_id: str, files: Sequence[FileChange]) -> ChangesUpdated:
    added = sum(f.lines_added for f in files)
    removed = sum(f.lines_removed for f in files)
    return ChangesUpdated(agent_id, len(files), added, removed)


class Inner(Protocol):
    """The hub as manager/writer.py's Publisher sees it (restated here: this package sits
    below manager/ and never imports it)."""

    @property
    def joint_commits(self) -> bool: ...

    def discard(self, first: int, last: int) -> None: ...

    def prepare(self, event: Event) -> Prepared: ...

    def prepare_rows(
        self, agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
    ) -> tuple[list[Prepared], list[bytes] | None]: ...

    def commit(self, prepared: Prepared) -> int: ...

    def commit_many(self, prepared: Sequence[Prepared]) -> int: ...

    def publish(self, event: Event) -> int: ...


# What `observe` looks at; the others (rows above all, the most numerous by far) pass with one
# set lookup.
WATCHED = frozenset({TurnStarted, TurnCompleted, TurnFailed, TurnCanceled, AgentRemoved})


class WatchedPublisher:
    """The hub as the manager sees it, with the turn and removal events shown to `observe`
    first."""

    def __init__(self, inner: Inner, observe: Callable[[Event], None]) -> None:
        self._inner = inner
        self._observe = observe

    @property
    def joint_commits(self) -> bool:
        return self._inner.joint_commits

    def discard(self, first: int, last: int) -> None:
        self._inner.discard(first, last)

    def prepare(self, event: Event) -> Prepared:
        if type(event) in WATCHED:
            self._observe(event)
        return self._inner.prepare(event)

    def prepare_rows(
        self, agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
    ) -> tuple[list[Prepared], list[bytes] | None]:
        return self._inner.prepare_rows(agent_id, epoch, first_seq, rows)  # rows: not watched

    def commit(self, prepared: Prepared) -> int:
        return self._inner.commit(prepared)

    def commit_many(self, prepared: Sequence[Prepared]) -> int:
        return self._inner.commit_many(prepared)

    def publish(self, event: Event) -> int:
        if type(event) in WATCHED:
            self._observe(event)
        return self._inner.publish(event)
