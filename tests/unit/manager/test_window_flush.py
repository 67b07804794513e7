"""The coalescer's window flush hands its row to the store and lets the actor go on: the next
fragments are coalesced and handed over while that row commits (a burst is not held in the
inbox behind one commit), and nothing is published before the rows ahead of it are stored."""

from __future__ import annotations

import asyncio
from typing import Any

from corral_server.domain.events import RowAppended
from corral_server.domain.timeline import AssistantMessage, Reasoning
from corral_server.providers.base import ProviderItem
from tests.unit.manager.harness import World, until

HELD = Reasoning("held")
NEXT = AssistantMessage("next", "m2")


def published(world: World) -> list[object]:
    return [e.row.item for e in world.publisher.events if isinstance(e, RowAppended)]


async def test_the_actor_takes_fragments_while_the_windows_row_commits(world: World) -> None:
    agent, session = await world.started()
    store = world.timeline
    handed: list[object] = []
    commits: list[asyncio.Future[Any]] = []
    real = store.append_encoded

    def held(agent_id: str, rows: Any, items: Any) -> asyncio.Future[Any]:
        """Every row reaches the store at once; the window row's commit waits for the test."""
        handed.extend(row.item for row in rows)
        stored = real(agent_id, rows, items)
        if HELD not in [row.item for row in rows]:
            return stored
        commits.append(asyncio.get_running_loop().create_future())
        return commits[-1]

    store.append_encoded = held  # type: ignore[method-assign]
    session.emit(ProviderItem("turn-1", HELD, "r1"))
    await world.drained(agent.id)
    await world.clock.advance(60)  # the window passed: its row is with the store, uncommitted
    await until(lambda: bool(commits))
    session.emit(ProviderItem("turn-1", NEXT, "m2"))
    session.emit(ProviderItem("turn-1", AssistantMessage("after", "m3"), "m3"))
    await until(lambda: NEXT in handed)  # taken and stored while the first row commits
    assert HELD not in published(world) and NEXT not in published(world)
    commits[0].set_result(None)
    await world.drained(agent.id)
    assert published(world)[-2:] == [HELD, NEXT]
