"""ForkAgent through the wire (docs/design.md#forks), on the scripted provider, which has no
fork of its own: the fork is a new agent holding the rows before the cut, and a new session
primed with their summary, which the scripted provider remembers (`/recall`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.domain.agent import AgentError
from corral_server.domain.timeline import UserMessage
from corral_server.manager.fork import FORKED_FROM_LABEL
from corral_server.manager.fork_priming import HEADER
from corral_server.providers.base import (
    ForkPoint,
    ProviderEvent,
    ProviderItem,
    ProviderTurnCompleted,
    ProviderTurnFailed,
)
from tests.integration.test_rewind import rows
from tests.support.client import (
    Stubs,
    create_request,
    error_details,
    next_message,
    prompt_request,
    text,
)
from tests.support.daemon import DaemonThread
from tests.support.fakes import FakeProvider, FakeSession


async def turn(stubs: Stubs, agent_id: str, *lines: str) -> list[Any]:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    return [e async for e in call]


def replies(page: Any) -> str:
    return "".join(r.item.assistant_message.text for r in page.rows)


async def agent_ids(stubs: Stubs) -> set[str]:
    listed = await stubs.agents.ListAgents(svc_pb.ListAgentsRequest(page_size=1000))
    return {a.id for a in listed.agents}


async def two_turns(stubs: Stubs, cwd: str) -> tuple[str, str]:
    """An agent with two echoed turns; its id and the second prompt's provider message id."""
    agent_id = (await stubs.agents.CreateAgent(create_request(cwd))).agent.id
    await turn(stubs, agent_id, "/echo", "/reply the first answer")
    second = await turn(stubs, agent_id, "/echo", "/reply the second answer")
    return agent_id, f"{second[0].turn_started.turn_id}-user"


async def test_a_fork_holds_the_rows_before_the_message_and_its_session_knows_them(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    source, message_id = await two_turns(stubs, str(tmp_path))
    before = await rows(stubs, source)
    cut = next(r.seq for r in before.rows if r.provider_message_id == message_id)
    forked = await stubs.agents.ForkAgent(
        svc_pb.ForkAgentRequest(
            agent_id=source, message_id=message_id, title="what if", labels={"try": "2"}
        )
    )
    fork = forked.agent
    assert forked.session == svc_pb.FORK_SESSION_CONTEXT and forked.rows == cut - 1
    assert fork.id != source and fork.lifecycle.HasField("idle")
    assert fork.title == "what if" and fork.provider_session_id
    assert dict(fork.labels) == {"try": "2", FORKED_FROM_LABEL: f"{source}@{before.epoch}:{cut}"}
    assert fork.usage_total.output_tokens == 0
    page = await rows(stubs, fork.id)
    assert page.epoch != before.epoch
    assert [r.seq for r in page.rows] == list(range(1, cut))
    assert [r.item for r in page.rows] == [r.item for r in before.rows if r.seq < cut]
    assert await rows(stubs, source) == before  # the source is left as it was
    # The fork's first turn resumes the primed session: it was told the conversation so far.
    await turn(stubs, fork.id, "/recall")
    recalled = replies(await rows(stubs, fork.id))
    assert HEADER.splitlines()[0] in recalled
    assert "> Assistant: the first answer" in recalled
    assert "the second answer" not in recalled


async def test_a_fork_at_a_cursor_keeps_the_rows_before_it_and_at_next_seq_all(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    source, _ = await two_turns(stubs, str(tmp_path))
    before = await rows(stubs, source)
    for seq in (2, before.window.next_seq):
        cursor = timeline_pb.Cursor(epoch=before.epoch, seq=seq)
        forked = await stubs.agents.ForkAgent(
            svc_pb.ForkAgentRequest(agent_id=source, cursor=cursor)
        )
        page = await rows(stubs, forked.agent.id)
        assert [r.item for r in page.rows] == [r.item for r in before.rows if r.seq < seq]
        assert forked.agent.title == ""  # its first prompt names it, as a new agent's does
    at_first = await stubs.agents.ForkAgent(
        svc_pb.ForkAgentRequest(
            agent_id=source, cursor=timeline_pb.Cursor(epoch=before.epoch, seq=1)
        )
    )
    assert (at_first.rows, at_first.session) == (0, svc_pb.FORK_SESSION_NEW)
    assert at_first.agent.provider_session_id == ""


async def test_subscribers_see_the_fork_only_once_it_is_idle_at_the_cut(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    source, message_id = await two_turns(stubs, str(tmp_path))
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest())
    while not any(e.HasField("synced") for e in (await next_message(watch)).events):
        pass
    forked = await stubs.agents.ForkAgent(
        svc_pb.ForkAgentRequest(agent_id=source, message_id=message_id)
    )
    first = None
    while first is None:
        for event in (await next_message(watch)).events:
            kind = event.WhichOneof("payload")
            named = getattr(event, kind).agent.id if kind == "agent_upserted" else ""
            if kind == "timeline_row_appended":
                named = event.timeline_row_appended.agent_id
            if named == forked.agent.id:
                first = event
                break
    watch.cancel()
    # Its first event is the announce: already idle with its session, its rows already in.
    assert first.WhichOneof("payload") == "agent_upserted"
    announced = first.agent_upserted.agent
    assert announced.lifecycle.HasField("idle") and announced.provider_session_id
    assert announced.timeline.next_seq == forked.rows + 1


@pytest.mark.parametrize(
    ("request_kw", "code", "reason"),
    [
        ({"agent_id": "nobody", "message_id": "m"}, "NOT_FOUND", "AGENT_NOT_FOUND"),
        ({"message_id": "no-such-message"}, "NOT_FOUND", "FORK_CUT_NOT_FOUND"),
        ({}, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        ({"cursor": {"epoch": "old", "seq": 1}}, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        ({"cursor": {"seq": 999}}, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        ({"message_id": "m", "labels": {"bad key": "v"}}, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    ],
)
async def test_a_fork_that_cannot_be_made_says_why_and_changes_nothing(
    aio_channel: grpc.aio.Channel,
    tmp_path: Path,
    request_kw: dict[str, Any],
    code: str,
    reason: str,
) -> None:
    stubs = Stubs.of(aio_channel)
    source, _ = await two_turns(stubs, str(tmp_path))
    before = await rows(stubs, source)
    request = svc_pb.ForkAgentRequest(agent_id=source)
    kw = dict(request_kw)
    if "cursor" in kw:
        cursor = {"epoch": before.epoch, **kw.pop("cursor")}
        request.cursor.CopyFrom(timeline_pb.Cursor(**cursor))
    for key, value in kw.items():
        if key == "labels":
            request.labels.update(value)
        else:
            setattr(request, key, value)
    listed = await agent_ids(stubs)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stubs.agents.ForkAgent(request)
    details = error_details(raised.value)
    assert (details.code, details.reason) == (getattr(grpc.StatusCode, code), reason)
    assert await agent_ids(stubs) == listed
    assert await rows(stubs, source) == before


async def test_a_fork_survives_a_restart_as_an_ordinary_agent(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            source, message_id = await two_turns(stubs, str(tmp_path))
            forked = await stubs.agents.ForkAgent(
                svc_pb.ForkAgentRequest(agent_id=source, message_id=message_id, title="kept")
            )
            kept = await rows(stubs, forked.agent.id)
    finally:
        first.stop()
    second = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            back = (
                await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=forked.agent.id))
            ).agent
            assert (back.title, dict(back.labels)) == ("kept", dict(forked.agent.labels))
            assert back.provider_session_id == forked.agent.provider_session_id
            assert await rows(stubs, back.id) == kept
            await turn(stubs, back.id, "/reply after the restart")
            page = await rows(stubs, back.id)
            assert page.epoch == kept.epoch and "after the restart" in replies(page)
    finally:
        second.stop()


class ForkingProvider(FakeProvider):
    """A fake provider with a fork of its own: it answers `forked-<n>`, remembering each point."""

    def __init__(self) -> None:
        super().__init__("forking")
        self.points: list[ForkPoint] = []

    async def fork_session(self, point: ForkPoint, cwd: str, daemon_tag: str) -> str:
        self.points.append(point)
        return f"forked-{len(self.points)}"


@pytest.fixture
def fake_daemon() -> Iterator[tuple[DaemonThread, FakeProvider, ForkingProvider]]:
    plain, forking = FakeProvider(), ForkingProvider()
    daemon = DaemonThread(Config(extra_providers={"fake": plain, "forking": forking})).start()
    yield daemon, plain, forking
    daemon.stop()


async def emit_on(daemon: DaemonThread, session: FakeSession, *events: ProviderEvent) -> None:
    """Report `events` through `session`, on the daemon's loop (where its sessions live)."""

    async def emit() -> None:
        session.emit(*events)

    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(emit(), daemon.loop))


async def fake_turn(
    daemon: DaemonThread, stubs: Stubs, provider: FakeProvider, agent_id: str, echo: str
) -> None:
    """One turn of a fake session: its prompt, echoed under `echo` when given, then its end."""
    started = await stubs.turns.SendPrompt(prompt_request(agent_id, "hello"))
    turn_id = started.turn_id
    events: list[ProviderEvent] = [ProviderTurnCompleted(turn_id)]
    if echo:
        events.insert(0, ProviderItem(turn_id, UserMessage("hello", message_id=echo), echo))
    await emit_on(daemon, provider.session, *events)
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))


async def test_a_failed_priming_turn_leaves_nothing_and_closes_its_session(
    fake_daemon: tuple[DaemonThread, FakeProvider, ForkingProvider], tmp_path: Path
) -> None:
    daemon, plain, _ = fake_daemon
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        stubs = Stubs.of(channel)
        source = await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="fake"))
        await fake_turn(daemon, stubs, plain, source.agent.id, "")
        listed = await agent_ids(stubs)
        head = (await rows(stubs, source.agent.id)).window.next_seq
        cursor = timeline_pb.Cursor(epoch=source.agent.timeline.epoch, seq=head)
        call = stubs.agents.ForkAgent(
            svc_pb.ForkAgentRequest(agent_id=source.agent.id, cursor=cursor)
        )
        deadline = asyncio.get_running_loop().time() + 10
        while len(plain.sessions) < 2 or plain.session.current_turn is None:
            assert asyncio.get_running_loop().time() < deadline, "no priming turn started"
            await asyncio.sleep(0.01)
        priming = plain.session
        failure = AgentError("the model is down", "AGENT_ERROR")
        await emit_on(daemon, priming, ProviderTurnFailed(priming.current_turn or "", failure))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        details = error_details(raised.value)
        assert (details.code, details.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "FORK_FAILED",
        )
        assert "the model is down" in details.message
        assert priming.closed and await agent_ids(stubs) == listed


async def test_a_native_fork_goes_back_to_before_a_confirmed_message_only(
    fake_daemon: tuple[DaemonThread, FakeProvider, ForkingProvider], tmp_path: Path
) -> None:
    daemon, _, forking = fake_daemon
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        stubs = Stubs.of(channel)
        made = await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="forking"))
        source = made.agent.id
        await fake_turn(daemon, stubs, forking, source, "")
        await fake_turn(daemon, stubs, forking, source, "msg-2")
        listed = await agent_ids(stubs)
        page = await rows(stubs, source)
        # The timeline's end is no message the provider confirmed: it could not place it.
        unconfirmed = timeline_pb.Cursor(epoch=page.epoch, seq=page.window.next_seq)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stubs.agents.ForkAgent(
                svc_pb.ForkAgentRequest(agent_id=source, cursor=unconfirmed)
            )
        details = error_details(raised.value)
        assert details.reason == "MESSAGE_NOT_CONFIRMED" and await agent_ids(stubs) == listed
        forked = await stubs.agents.ForkAgent(
            svc_pb.ForkAgentRequest(agent_id=source, message_id="msg-2")
        )
        assert forked.session == svc_pb.FORK_SESSION_PROVIDER
        assert forked.agent.provider_session_id == "forked-1"
        (point,) = forking.points
        second = next(r for r in page.rows if r.provider_message_id == "msg-2")
        assert point == ForkPoint(made.agent.provider_session_id, "msg-2", second.turn_id)
        assert forked.rows == second.seq - 1 and len(forking.sessions) == 1  # none opened


async def test_a_conversation_whose_lines_read_as_commands_still_primes_the_fork(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    source = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    failed = await turn(stubs, source, "look:", "/fail as told")  # its own turn fails
    assert failed[-1].HasField("turn_failed")
    head = await rows(stubs, source)
    whole = timeline_pb.Cursor(epoch=head.epoch, seq=head.window.next_seq)
    forked = await stubs.agents.ForkAgent(svc_pb.ForkAgentRequest(agent_id=source, cursor=whole))
    assert forked.session == svc_pb.FORK_SESSION_CONTEXT  # the quoted line failed nothing
    await turn(stubs, forked.agent.id, "/recall")
    assert "> /fail as told" in replies(await rows(stubs, forked.agent.id))


async def test_a_fork_of_a_trimmed_timeline_holds_the_retained_rows_before_the_cut(
    tmp_path: Path,
) -> None:
    daemon = DaemonThread(Config(timeline_retain_rows=5)).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            source, message_id = await two_turns(stubs, str(tmp_path))
            await turn(stubs, source, "/reply the third answer")
            kept = await rows(stubs, source)
            assert kept.window.min_seq > 1  # retention dropped the oldest rows
            forked = await stubs.agents.ForkAgent(
                svc_pb.ForkAgentRequest(agent_id=source, message_id=message_id)
            )
            page = await rows(stubs, forked.agent.id)
            cut = int(forked.agent.labels[FORKED_FROM_LABEL].rsplit(":", 1)[1])
            before = [r.item for r in kept.rows if r.seq < cut]
            assert before and [r.item for r in page.rows] == before
    finally:
        daemon.stop()
