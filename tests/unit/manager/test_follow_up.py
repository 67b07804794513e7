"""A follow-up prompt (docs/design.md#permissions) where the wire cannot reach it: the agent closes
while the follow-up waits for the asking turn to stop, so it never starts and leaves no task
behind."""

from __future__ import annotations

from corral_server.domain.agent import (
    Closed,
    PendingPermission,
    PermissionBehavior,
    PermissionResponse,
)
from corral_server.domain.content import Prompt, TextPart
from corral_server.providers.base import ProviderPermissionRequested
from tests.unit.manager.harness import World, until


async def test_a_follow_up_waiting_on_the_interrupt_never_starts_once_the_agent_closes(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderPermissionRequested("turn-1", PendingPermission("p1", "write")))
    await world.drained(agent.id)

    async def answer_with_follow_up(
        turn_id: str, request_id: str, response: PermissionResponse
    ) -> Prompt | None:
        return (TextPart("go on"),)

    session.respond_permission = answer_with_follow_up  # type: ignore[method-assign]
    session.interrupt_behaviour = "hang"
    answered = await world.manager.respond_permission(
        agent.id, "p1", PermissionResponse(PermissionBehavior.ALLOW)
    )
    assert answered.pending_permissions == ()
    await until(lambda: "interrupt" in session.calls)  # the follow-up waits on it
    actor = world.manager.directory.actors[agent.id]
    assert len(actor._parts.permissions.follow_ups) == 1
    closed = await world.manager.close(agent.id)
    assert isinstance(closed.lifecycle, Closed)
    await until(lambda: not actor._parts.permissions.follow_ups)
    assert session.calls.count("start_turn") == 1  # only the asking turn ever started
