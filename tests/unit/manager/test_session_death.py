"""ProviderSessionDied at the actor: the session is dropped (and closed), a turn the provider
did not end fails with AGENT_EXITED, an idle death leaves one error row, the next turn opens a
new session resuming the same provider session, and the death of a session the agent no
longer uses (replaced by a reload) touches nothing."""

from __future__ import annotations

from corral_server.domain.agent import AgentError, Errored, Idle, Running
from corral_server.domain.events import TurnFailed
from corral_server.domain.timeline import ErrorItem
from corral_server.manager.turns import IfRunning
from corral_server.providers.base import (
    ProviderSessionDied,
    ProviderTurnCompleted,
    ProviderTurnFailed,
)
from tests.unit.manager.harness import PROMPT, World


async def test_a_death_mid_turn_fails_the_turn_and_the_next_turn_resumes_in_a_new_session(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderSessionDied("claude exited with status 3"))
    after = await world.drained(agent.id)
    assert session.closed
    [failed] = world.publisher.of_type(TurnFailed)
    assert failed.turn_id == "turn-1" and failed.error.code == "AGENT_EXITED"
    assert "claude exited with status 3" in failed.error.message
    assert isinstance(after.lifecycle, Errored)
    errors = [i for i in await world.items(agent.id) if isinstance(i, ErrorItem)]
    assert [e.code for e in errors] == ["AGENT_EXITED"]

    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    new = world.provider.session
    assert new is not session and new.calls == ["start_turn"]
    assert world.provider.configs[-1].resume_session_id == session.session_id
    assert world.manager.get(agent.id).lifecycle == Running("turn-1")


async def test_a_death_after_the_provider_failed_the_turn_adds_no_second_row(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(
        ProviderTurnFailed("turn-1", AgentError("codex exited with status 3", "AGENT_EXITED")),
        ProviderSessionDied("codex exited with status 3"),
    )
    await world.drained(agent.id)
    assert len(world.publisher.of_type(TurnFailed)) == 1
    errors = [i for i in await world.items(agent.id) if isinstance(i, ErrorItem)]
    assert len(errors) == 1 and session.closed


async def test_an_idle_death_leaves_an_error_row_and_the_agent_idle(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    session.emit(ProviderSessionDied("killed by the OOM killer"))
    after = await world.drained(agent.id)
    assert after.lifecycle == Idle() and session.closed
    assert after.last_error is not None and after.last_error.code == "AGENT_EXITED"
    last = (await world.items(agent.id))[-1]
    assert isinstance(last, ErrorItem) and "OOM" in last.message


async def test_the_death_of_a_session_replaced_by_a_reload_touches_nothing(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.manager.reload(agent.id, rehydrate=False)
    rows = await world.rows(agent.id)
    session.emit(ProviderSessionDied("the old process finally exited"))
    after = await world.drained(agent.id)
    assert after.lifecycle == Idle() and await world.rows(agent.id) == rows
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    assert len(world.provider.sessions) == 2  # the reload's session runs the turn
    assert world.provider.session.calls == ["start_turn"]
