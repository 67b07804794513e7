"""A provider asking for more permissions than MAX_PENDING_PERMISSIONS at once (a provider
bug): the asking turn fails with TOO_MANY_PERMISSIONS, the provider is asked to stop it, and
the rest of the batch of provider events is still handled."""

from __future__ import annotations

from corral_server.domain.agent import Errored, PendingPermission
from corral_server.domain.events import TurnCompleted, TurnFailed, TurnStarted
from corral_server.domain.timeline import AssistantMessage
from corral_server.manager.permissions import MAX_PENDING_PERMISSIONS, TOO_MANY_PERMISSIONS
from corral_server.providers.base import (
    ProviderItem,
    ProviderPermissionRequested,
    ProviderTurnCompleted,
    ProviderTurnStarted,
)
from tests.unit.manager.harness import World, until


async def test_one_request_too_many_fails_the_turn_and_the_batch_goes_on(tmp_path: object) -> None:
    world = World(str(tmp_path))
    agent, session = await world.started()
    requests = [
        ProviderPermissionRequested("turn-1", PendingPermission(f"p{n}", "write"))
        for n in range(MAX_PENDING_PERMISSIONS + 1)
    ]
    # One batch: the requests, then a whole turn the provider starts by itself.
    session.emit(
        *requests,
        ProviderTurnStarted("auto-1"),
        ProviderItem("auto-1", AssistantMessage("after", message_id="m1"), "m1"),
        ProviderTurnCompleted("auto-1"),
    )
    await world.drained(agent.id)

    (failed,) = world.publisher.of_type(TurnFailed)
    assert (failed.turn_id, failed.error.code) == ("turn-1", TOO_MANY_PERMISSIONS)
    assert str(MAX_PENDING_PERMISSIONS) in failed.error.message
    assert any(isinstance(lc, Errored) for lc in world.lifecycles(agent.id))
    # Nothing of the batch after the request was lost.
    assert [e.turn_id for e in world.publisher.of_type(TurnStarted)] == ["turn-1", "auto-1"]
    assert [e.turn_id for e in world.publisher.of_type(TurnCompleted)] == ["auto-1"]
    assert world.manager.get(agent.id).pending_permissions == ()
    rows = await world.rows(agent.id)
    assert (rows[-1].turn_id, rows[-1].item) == ("auto-1", AssistantMessage("after", "m1"))
    # The provider was asked to stop the failed turn (off the queue).
    await until(lambda: session.interrupted == ["turn-1"])
