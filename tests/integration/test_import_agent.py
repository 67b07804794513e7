"""ImportAgent through the wire with a provider that can import (the scripted provider plus an
`import_history` over a fixed set of sessions): the imported conversation becomes the new
agent's rows, silently, under a fresh epoch; the agent is idle with the provider session id,
and its first turn asks the provider to resume that session. Bad input, an unknown provider,
a provider that cannot import and a session the provider does not know are refused with
their documented status, creating nothing. (tests/agents/test_import.py imports real Claude
Code, Codex and claude-agent-acp sessions.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.clock import FakeClock
from corral_server.domain.timeline import AssistantMessage, ToolCall, ToolCallStatus, UserMessage
from corral_server.errors import ProviderSessionNotFound
from corral_server.providers.base import EventSink, ProviderItem, SessionConfig
from corral_server.providers.scripted_provider import ScriptedProvider, ScriptedSession
from tests.support.client import Stubs, error_details, prompt_request
from tests.support.daemon import DaemonThread

INVALID = grpc.StatusCode.INVALID_ARGUMENT
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION

HISTORY = [
    ProviderItem("t1", UserMessage("fix the bug", message_id="u1"), "u1", from_history=True),
    ProviderItem("t1", AssistantMessage("looking", "m1"), "m1", from_history=True),
    ProviderItem(
        "t1",
        ToolCall("c1", "read", ToolCallStatus.COMPLETED, {"path": "a.py"}, "ok"),
        from_history=True,
    ),
    ProviderItem("t1", AssistantMessage("fixed", "m2"), "m2", from_history=True),
]


class ImportingProvider(ScriptedProvider):
    """Knows session "s-1" (HISTORY) and "s-empty" (no conversation); records the resume id
    of every session corral opens."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock, name="importing")
        self.resumed: list[str] = []

    async def import_history(
        self, provider_session_id: str, cwd: str, daemon_tag: str
    ) -> list[ProviderItem]:
        match provider_session_id:
            case "s-1":
                return list(HISTORY)
            case "s-empty":
                return []
            case _:
                raise ProviderSessionNotFound(provider_session_id, "never made here")

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ScriptedSession:
        self.resumed.append(config.resume_session_id)
        return await super().create_session(config, sink)


Served = tuple[DaemonThread, ImportingProvider]


@pytest.fixture
def daemon_and_provider(tmp_path: Path) -> Iterator[Served]:
    clock = FakeClock()
    provider = ImportingProvider(clock)
    config = Config(state_dir=tmp_path / "state", extra_providers={"importing": provider})
    daemon = DaemonThread(config, clock).start()
    try:
        yield daemon, provider
    finally:
        daemon.stop()


@pytest.fixture
async def stubs(
    daemon_and_provider: Served,
) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(daemon_and_provider[0].address) as channel:
        yield Stubs.of(channel)


def importing(cwd: Path | str, session_id: str = "s-1", provider: str = "importing") -> Any:
    return agent_pb.ImportAgentRequest(
        provider=provider, provider_session_id=session_id, cwd=str(cwd)
    )


async def rows_of(stubs: Stubs, agent_id: str) -> Any:
    return (
        await stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(
                agent_id=agent_id, direction=tl_pb.TIMELINE_DIRECTION_TAIL, limit=0
            )
        )
    ).rows


async def test_an_imported_session_is_an_idle_agent_holding_its_history_under_a_new_epoch(
    stubs: Stubs, daemon_and_provider: Served, tmp_path: Path
) -> None:
    agent = (await stubs.agents.ImportAgent(importing(tmp_path))).agent
    assert agent.lifecycle.WhichOneof("state") == "idle"
    assert (agent.provider, agent.provider_session_id, agent.cwd) == (
        "importing",
        "s-1",
        str(tmp_path),
    )
    assert agent.timeline.epoch and agent.timeline.next_seq == len(HISTORY) + 1
    assert not agent.attention.required
    rows = await rows_of(stubs, agent.id)
    assert [r.seq for r in rows] == [1, 2, 3, 4]
    assert [r.item.WhichOneof("kind") for r in rows] == [
        "user_message",
        "assistant_message",
        "tool_call",
        "assistant_message",
    ]
    assert rows[0].item.user_message.text == "fix the bug"
    assert rows[2].item.tool_call.call_id == "c1"
    assert [r.provider_message_id for r in rows] == ["u1", "m1", "", "m2"]
    assert all(r.turn_id == "" for r in rows)  # history names no turn of corral's
    listed = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
    assert [a.id for a in listed.agents] == [agent.id]
    # A second import of the same session is a second agent with its own epoch.
    other = (await stubs.agents.ImportAgent(importing(tmp_path))).agent
    assert other.id != agent.id and other.timeline.epoch != agent.timeline.epoch


async def test_the_first_turn_of_an_imported_agent_resumes_the_provider_session(
    stubs: Stubs, daemon_and_provider: Served, tmp_path: Path
) -> None:
    _, provider = daemon_and_provider
    agent = (await stubs.agents.ImportAgent(importing(tmp_path))).agent
    assert provider.resumed == []  # the import opened no session of corral's
    await stubs.turns.SendPrompt(prompt_request(agent.id, "and now?"))
    waited = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
    assert waited.status == turn_pb.WAIT_STATUS_IDLE
    assert provider.resumed == ["s-1"]
    rows = await rows_of(stubs, agent.id)
    assert len(rows) > len(HISTORY) + 1
    assert rows[len(HISTORY)].item.user_message.text == "and now?"


async def test_an_imported_agent_survives_a_daemon_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    provider = ImportingProvider(clock)
    config = Config(state_dir=tmp_path / "state", extra_providers={"importing": provider})
    first = DaemonThread(config, clock).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            agent = (await Stubs.of(channel).agents.ImportAgent(importing(tmp_path))).agent
    finally:
        first.stop()
    second = DaemonThread(config, clock).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            got = (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent.id))).agent
            rows = await rows_of(stubs, agent.id)
    finally:
        second.stop()
    assert got.provider_session_id == "s-1"
    assert got.timeline.epoch == agent.timeline.epoch
    assert len(rows) == len(HISTORY)


@pytest.mark.parametrize(
    ("provider", "session_id", "cwd", "code", "reason", "field"),
    [
        ("", "s-1", "TMP", INVALID, "INVALID_ARGUMENT", "provider"),
        ("importing", "", "TMP", INVALID, "INVALID_ARGUMENT", "provider_session_id"),
        ("importing", "s" * 5000, "TMP", INVALID, "INVALID_ARGUMENT", "provider_session_id"),
        ("p" * 5000, "s-1", "TMP", INVALID, "INVALID_ARGUMENT", "provider"),
        ("importing", "s-1", "", INVALID, "INVALID_ARGUMENT", "cwd"),
        ("importing", "s-1", "relative/dir", INVALID, "INVALID_ARGUMENT", "cwd"),
        ("importing", "s-1", "/no/such/dir", INVALID, "INVALID_ARGUMENT", "cwd"),
        ("nope", "s-1", "TMP", INVALID, "UNKNOWN_PROVIDER", "provider"),
        ("scripted", "s-1", "TMP", PRECONDITION, "IMPORT_UNSUPPORTED", ""),
        ("importing", "s-2", "TMP", grpc.StatusCode.NOT_FOUND, "PROVIDER_SESSION_NOT_FOUND", ""),
        ("importing", "s-empty", "TMP", PRECONDITION, "FAILED_PRECONDITION", ""),
    ],
)
async def test_a_refused_import_answers_its_status_and_creates_nothing(
    stubs: Stubs,
    tmp_path: Path,
    provider: str,
    session_id: str,
    cwd: str,
    code: grpc.StatusCode,
    reason: str,
    field: str,
) -> None:
    request = importing(str(tmp_path) if cwd == "TMP" else cwd, session_id, provider)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stubs.agents.ImportAgent(request)
    details = error_details(caught.value)
    assert (details.code, details.reason) == (code, reason), details
    assert details.message
    if field:
        assert field in details.fields, details
    listed = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest(include_archived=True))
    assert list(listed.agents) == []
