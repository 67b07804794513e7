"""Forwarding through the wire, with two ordinary daemons and no NATS: daemon B is told that
an agent lives on daemon A (an injected `Config.forwarding`), and a call on B that changes it
acts on A's agent and answers as A does; a read on B is answered by B; a forwarded call that
reaches a node that does not own the agent is refused with OWNER_MOVED, never forwarded again;
an owner that cannot be reached is OWNER_UNREACHABLE."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server import errors
from corral_server.rpc.forward_relay import Forwarding
from tests import conftest
from tests.support.client import Stubs, create_request, error_details, prompt_request, text
from tests.support.daemon import DaemonThread
from tests.support.nats import free_ports


@dataclass
class Beliefs:
    """Where each node believes agents live, and the nodes' addresses (shared)."""

    owners: dict[str, dict[str, str]] = field(default_factory=lambda: {"a": {}, "b": {}})
    addresses: dict[str, str] = field(default_factory=dict)

    def forwarding(self, node: str) -> Forwarding:
        return Forwarding(node, self.owners[node].get, self.addresses.get, place=named_node)


def named_node(labels: Mapping[str, str]) -> str | None:
    """A placement as simple as can be: the node the label names (cluster/nodes.py has the
    real one, tested against NATS)."""
    return labels.get("corral.node")


@dataclass
class Pair:
    a: DaemonThread
    b: DaemonThread
    beliefs: Beliefs


def start_pair(config: Any = None) -> Pair:
    beliefs = Beliefs()
    base = config or conftest.test_config()
    a = DaemonThread(replace(base, forwarding=beliefs.forwarding("a"))).start()
    b = DaemonThread(replace(conftest.test_config(), forwarding=beliefs.forwarding("b"))).start()
    beliefs.addresses.update(a=a.address, b=b.address)
    return Pair(a, b, beliefs)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    started = start_pair()
    yield started
    started.a.stop()
    started.b.stop()


@dataclass
class Clients:
    a: Stubs
    b: Stubs


@pytest.fixture
async def clients(pair: Pair) -> AsyncIterator[Clients]:
    async with (
        grpc.aio.insecure_channel(pair.a.address) as to_a,
        grpc.aio.insecure_channel(pair.b.address) as to_b,
    ):
        yield Clients(Stubs.of(to_a), Stubs.of(to_b))


async def agent_on_a(pair: Pair, clients: Clients, cwd: Path, **kw: Any) -> str:
    """A new agent on A, which B believes lives on A."""
    agent_id: str = (await clients.a.agents.CreateAgent(create_request(str(cwd), **kw))).agent.id
    pair.beliefs.owners["b"][agent_id] = "a"
    return agent_id


async def refusal(call: Any) -> tuple[str, str, str, dict[str, str]]:
    """Code, reason, message and ErrorInfo metadata of a call that must fail."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    details = error_details(caught.value)
    return details.code.name, details.reason, details.message, info_metadata(caught.value)


def info_metadata(error: grpc.aio.AioRpcError) -> dict[str, str]:
    status = rpc_status.from_call(cast(grpc.Call, error))
    assert status is not None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return dict(info.metadata)
    return {}


async def test_changing_calls_on_b_act_on_the_agent_a_owns(
    pair: Pair, clients: Clients, tmp_path: Path
) -> None:
    agent_id = await agent_on_a(pair, clients, tmp_path)
    sent = await clients.b.turns.SendPrompt(prompt_request(agent_id, "/reply from b"))
    assert sent.disposition == turn_pb.PROMPT_DISPOSITION_STARTED
    idle = await clients.b.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    assert idle.status == turn_pb.WAIT_STATUS_IDLE
    rows = await clients.a.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    replies = [r.item.assistant_message for r in rows.rows if r.item.HasField("assistant_message")]
    assert [r.turn_id for r in rows.rows if r.item.HasField("user_message")] == [sent.turn_id]
    assert "from b" in str(replies)
    canceled = await clients.b.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    assert canceled.outcome == turn_pb.CANCEL_OUTCOME_NOT_RUNNING
    assert canceled.agent == (await clients.a.agents.GetAgent(_get(agent_id))).agent
    updated = await clients.b.agents.UpdateAgent(
        agent_pb.UpdateAgentRequest(agent_id=agent_id, title="named on b")
    )
    assert updated.agent.title == "named on b"
    assert (await clients.a.agents.GetAgent(_get(agent_id))).agent.title == "named on b"
    archived = await clients.b.agents.ArchiveAgent(agent_pb.ArchiveAgentRequest(agent_id=agent_id))
    assert list(archived.archived_agent_ids) == [agent_id]
    assert (await clients.a.agents.GetAgent(_get(agent_id))).agent.HasField("archived_at")


def _get(agent_id: str) -> agent_pb.GetAgentRequest:
    return agent_pb.GetAgentRequest(agent_id=agent_id)


async def test_a_read_on_b_is_answered_by_b_not_forwarded(
    pair: Pair, clients: Clients, tmp_path: Path
) -> None:
    agent_id = await agent_on_a(pair, clients, tmp_path)
    code, reason, _, _ = await refusal(clients.b.agents.GetAgent(_get(agent_id)))
    assert (code, reason) == ("NOT_FOUND", "AGENT_NOT_FOUND")  # B itself has no such agent
    fetch = clients.b.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    assert (await refusal(fetch))[:2] == ("NOT_FOUND", "AGENT_NOT_FOUND")


async def test_the_owners_refusal_comes_back_unchanged(
    pair: Pair, clients: Clients, tmp_path: Path
) -> None:
    agent_id = await agent_on_a(pair, clients, tmp_path)
    await clients.a.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id=agent_id))
    request = prompt_request(agent_id, "hello")
    direct = await refusal(clients.a.turns.SendPrompt(request))
    assert direct[:2] == ("FAILED_PRECONDITION", "AGENT_CLOSED")
    assert await refusal(clients.b.turns.SendPrompt(request)) == direct


async def test_stream_turn_on_b_streams_the_turn_a_runs(
    pair: Pair, clients: Clients, tmp_path: Path
) -> None:
    agent_id = await agent_on_a(pair, clients, tmp_path)
    call = clients.b.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("/reply streamed"))
    )
    events = [event async for event in call]
    kinds = [event.WhichOneof("event") for event in events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_completed"
    turn_id = events[0].turn_started.turn_id
    assert events[-1].turn_completed.turn_id == turn_id
    rows = await clients.a.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    assert turn_id in {row.turn_id for row in rows.rows}


async def test_a_forwarded_call_reaching_a_node_that_does_not_own_the_agent_is_owner_moved(
    pair: Pair, clients: Clients, tmp_path: Path
) -> None:
    agent_id = await agent_on_a(pair, clients, tmp_path)
    pair.beliefs.owners["a"][agent_id] = "b"  # A is wrong: it thinks B owns it
    code, reason, _, metadata = await refusal(
        clients.b.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    )
    # A answered (node b is A's belief, B's is a), and did not send it back: B would have
    # refused that with node a.
    assert (code, reason, metadata) == (
        "UNAVAILABLE",
        "OWNER_MOVED",
        {"node": "b", "agent_id": agent_id},
    )
    del pair.beliefs.owners["a"][agent_id]
    # A client's call that says it was forwarded is not forwarded either.
    marked = clients.b.turns.CancelTurn(
        turn_pb.CancelTurnRequest(agent_id=agent_id), metadata=(("corral-forwarded-from", "x"),)
    )
    assert (await refusal(marked))[1::2] == ("OWNER_MOVED", {"node": "a", "agent_id": agent_id})


async def test_an_owner_that_cannot_be_reached_is_owner_unreachable(
    pair: Pair, clients: Clients
) -> None:
    (port,) = free_ports(1)  # nothing listens there
    pair.beliefs.addresses["gone"] = f"127.0.0.1:{port}"
    pair.beliefs.owners["b"]["1" * 32] = "gone"
    pair.beliefs.owners["b"]["2" * 32] = "nowhere"  # no address known at all
    cancel = turn_pb.CancelTurnRequest
    code, reason, message, metadata = await refusal(
        clients.b.turns.CancelTurn(cancel(agent_id="1" * 32), timeout=20)
    )
    assert (code, reason) == ("UNAVAILABLE", "OWNER_UNREACHABLE")
    assert metadata == {"node": "gone", "address": f"127.0.0.1:{port}"}
    assert f"node gone at 127.0.0.1:{port}" in message
    code, reason, _, metadata = await refusal(
        clients.b.turns.CancelTurn(cancel(agent_id="2" * 32), timeout=20)
    )
    assert (code, reason, metadata) == (
        "UNAVAILABLE",
        "OWNER_UNREACHABLE",
        {"node": "nowhere", "address": ""},
    )


class OwnedElsewhere(errors.ShuttingDown):
    """What a cluster node's servicer answers for an agent that moved (UNAVAILABLE)."""

    reason = "AGENT_OWNED_ELSEWHERE"

    def __init__(self, node: str) -> None:
        errors.CorralError.__init__(self, f"owned by node {node}", metadata={"node": node})


def owned_by(node: str, calls: list[str]) -> Any:
    """A manager's cancel that finds the agent owned by `node` (the lease moved meanwhile)."""

    async def cancel(agent_id: str) -> Any:
        calls.append(agent_id)
        raise OwnedElsewhere(node)

    return cancel


async def test_a_servicer_finding_the_agent_owned_elsewhere_has_the_call_forwarded_once(
    pair: Pair, clients: Clients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_id = (await clients.a.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    assert pair.b.daemon is not None and pair.a.daemon is not None
    calls: list[str] = []
    # B's look-up says "here" (B knows nothing of the agent); its manager then finds it is A's.
    monkeypatch.setattr(pair.b.daemon.manager, "cancel", owned_by("a", calls))
    canceled = await clients.b.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    assert canceled.outcome == turn_pb.CANCEL_OUTCOME_NOT_RUNNING
    assert canceled.agent.id == agent_id and calls == [agent_id]
    # The same race on the node a call was forwarded to: refused, not forwarded again.
    monkeypatch.setattr(pair.a.daemon.manager, "cancel", owned_by("b", calls))
    pair.beliefs.owners["b"][agent_id] = "a"
    moved = await refusal(clients.b.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id)))
    assert moved[1::2] == ("OWNER_MOVED", {"node": "b", "agent_id": agent_id})
    assert calls == [agent_id, agent_id]  # B's manager was not asked the second time


async def test_create_agent_goes_to_the_node_its_placement_names(
    pair: Pair, clients: Clients, tmp_path: Path
) -> None:
    created = await clients.b.agents.CreateAgent(
        create_request(str(tmp_path), labels={"corral.node": "a"}, title="placed")
    )
    agent_id = created.agent.id
    assert (await clients.a.agents.GetAgent(_get(agent_id))).agent.title == "placed"
    assert (await refusal(clients.b.agents.GetAgent(_get(agent_id))))[1] == "AGENT_NOT_FOUND"
    here = await clients.b.agents.CreateAgent(create_request(str(tmp_path), title="here"))
    assert (await clients.b.agents.GetAgent(_get(here.agent.id))).agent.title == "here"


TOKEN = "forwarded-token-0123456789"


@pytest.fixture(scope="module")
def secured_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A takes tokens; B takes none (B lets every call in, A decides)."""
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(TOKEN + "\n")
    tokens.chmod(0o600)
    started = start_pair(replace(conftest.test_config(), auth_token_file=tokens))
    yield started
    started.a.stop()
    started.b.stop()


async def test_the_callers_token_reaches_the_owner_which_checks_it(
    secured_pair: Pair, tmp_path: Path
) -> None:
    good = (("authorization", f"Bearer {TOKEN}"),)
    async with (
        grpc.aio.insecure_channel(secured_pair.a.address) as to_a,
        grpc.aio.insecure_channel(secured_pair.b.address) as to_b,
    ):
        a, b = Stubs.of(to_a), Stubs.of(to_b)
        created = await a.agents.CreateAgent(create_request(str(tmp_path)), metadata=good)
        agent_id = created.agent.id
        secured_pair.beliefs.owners["b"][agent_id] = "a"
        request = turn_pb.CancelTurnRequest(agent_id=agent_id)
        answer = await b.turns.CancelTurn(request, metadata=good, timeout=20)
        assert answer.agent.id == agent_id
        wrong = (("authorization", "Bearer not-the-token-xyz"),)
        for metadata, reason in ((wrong, "TOKEN_INVALID"), ((), "TOKEN_MISSING")):
            refused = await refusal(b.turns.CancelTurn(request, metadata=metadata, timeout=20))
            direct = await refusal(a.turns.CancelTurn(request, metadata=metadata, timeout=20))
            assert refused == direct and refused[:2] == ("UNAUTHENTICATED", reason)
