"""ForkAgent through corral's wire against the real programs, offline (the fake model server):
Codex forks its own thread (`thread/fork` before the cut's turn); Claude Code has no fork corral
can place at a message, so the fork is a new session primed with the conversation's summary.
Each fork then runs a turn on a restarted daemon: the model sees the conversation before the
cut, and not what came after it."""

from __future__ import annotations

from pathlib import Path

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_server.manager.fork_priming import HEADER
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider
from tests.agents import programs
from tests.agents.conftest import Place
from tests.agents.resume_support import create_agent, daemon_on, ending, get_agent, timeline, turn
from tests.agents.test_codex_fork import texts_sent
from tests.agents.test_resume_after_restart import anthropic_texts, leftovers
from tests.support.fake_models import FakeModelServer

__all__ = ["leftovers"]  # the fixture, shared


async def test_a_codex_fork_continues_codexs_own_fork_of_the_thread_before_the_message(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.codex(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = CodexProvider(program.argv[:1], program.env)
    state = tmp_path / "state"
    async with daemon_on(state, "codex", provider) as stubs:
        source = await create_agent(stubs, place.cwd, "codex")
        assert ending(await turn(stubs, source, "First [[reply: one]]")) == "turn_completed"
        assert ending(await turn(stubs, source, "Second [[reply: two]]")) == "turn_completed"
        page = await stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(agent_id=source, limit=0)
        )
        second = [r for r in page.rows if r.item.HasField("user_message")][1]
        assert second.provider_message_id  # codex confirmed it
        forked = await stubs.agents.ForkAgent(
            svc_pb.ForkAgentRequest(agent_id=source, message_id=second.provider_message_id)
        )
        assert forked.session == svc_pb.FORK_SESSION_PROVIDER
        thread = (await get_agent(stubs, source)).provider_session_id
        assert forked.agent.provider_session_id not in ("", thread)
        assert await timeline(stubs, forked.agent.id) == [
            ("user_message", "First [[reply: one]]"),
            ("assistant_message", "one"),
        ]
    async with daemon_on(state, "codex", provider) as stubs:
        fork_id = forked.agent.id
        assert ending(await turn(stubs, fork_id, "Third [[reply: three]]")) == "turn_completed"
        assert (await get_agent(stubs, fork_id)).provider_session_id == (
            forked.agent.provider_session_id
        )
    texts = texts_sent(fake)
    assert "First [[reply: one]]" in texts and "one" in texts
    assert "Second [[reply: two]]" not in texts and "two" not in texts


async def test_a_claude_code_fork_is_a_new_session_primed_with_the_conversation(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    state = tmp_path / "state"
    async with daemon_on(state, "claude-code", provider) as stubs:
        source = await create_agent(stubs, place.cwd, "claude-code", model=programs.CLAUDE_MODEL)
        assert ending(await turn(stubs, source, "First [[reply: one]]")) == "turn_completed"
        assert ending(await turn(stubs, source, "Second [[reply: two]]")) == "turn_completed"
        agent = await get_agent(stubs, source)
        cut = timeline_pb.Cursor(epoch=agent.timeline.epoch, seq=3)  # before "Second"
        forked = await stubs.agents.ForkAgent(svc_pb.ForkAgentRequest(agent_id=source, cursor=cut))
        assert (forked.session, forked.rows) == (svc_pb.FORK_SESSION_CONTEXT, 2)
        assert forked.agent.provider_session_id not in ("", agent.provider_session_id)
        assert forked.agent.usage_total.output_tokens == 0  # the priming turn counts nowhere
        assert await timeline(stubs, forked.agent.id) == [
            ("user_message", "First [[reply: one]]"),
            ("assistant_message", "one"),
        ]
    async with daemon_on(state, "claude-code", provider) as stubs:
        assert ending(await turn(stubs, forked.agent.id, "Next [[reply: ok]]")) == "turn_completed"
    said = "\n".join(anthropic_texts(fake.model_calls()[-1]))
    assert HEADER.splitlines()[0] in said and "> Assistant: one" in said
    assert "Second [[reply: two]]" not in said
