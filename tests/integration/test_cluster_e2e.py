"""A whole cluster of real processes (tests/support/cluster_nodes.py): three NATS servers, three
`corral serve --cluster` nodes and Envoy running deploy/cluster/envoy.yaml in front of them.
Agents are created on different nodes and sent prompts (the scripted provider); Python clients
subscribed from revision 0 through Envoy and to each node directly see, byte for byte, what a
replay from revision 0 on another node gives; grpcurl through Envoy lists and pages the same.
Then, each in its own cluster: the NATS server leading the stream is killed with SIGKILL while
prompts keep coming (every acknowledged prompt stored once, no subscriber sees a gap or a
duplicate), and a corral node is killed with SIGKILL (a subscriber that was on it resumes
through Envoy on another node from its last revision, with no reset and no gap)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.cluster_nodes import Cluster, running_cluster

T = TypeVar("T")
TIMEOUT = 60.0  # generous: the suite runs two of these on 2 cores beside everything else
GRPCURL = Path(sys.executable).parent / "grpcurl"
_message_ids = itertools.count()


async def until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Ask `probe` (a coroutine function) until it answers something true, within TIMEOUT."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not (answer := await probe()):
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)
    return answer


@contextlib.asynccontextmanager
async def stubs_at(address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield Stubs.of(channel)


@dataclass
class Subscriber:
    """A Subscribe from revision 0 that keeps every event with a revision, serialized. With
    `resume_at`, a stream that breaks is opened again there from the last revision seen and
    the incarnation its `synced` named."""

    name: str
    address: str
    resume_at: str | None = None
    events: list[bytes] = field(default_factory=list)
    revisions: list[int] = field(default_factory=list)
    synced: list[event_pb.Synced] = field(default_factory=list)
    resets: int = 0
    breaks: list[tuple[int, str]] = field(default_factory=list)  # (last revision, status)
    incarnation: str = ""
    task: asyncio.Task[None] | None = None

    @property
    def last(self) -> int:
        return self.revisions[-1] if self.revisions else 0

    def start(self) -> Subscriber:
        self.task = asyncio.ensure_future(self._follow())
        return self

    async def _follow(self) -> None:
        address = self.address
        while True:
            request = event_pb.SubscribeRequest(
                resume_revision=self.last, resume_incarnation=self.incarnation
            )
            async with stubs_at(address) as stubs:
                try:
                    async for response in stubs.events.Subscribe(request):
                        self._take(response.events)
                    raise AssertionError(f"{self.name}: the stream ended")
                except grpc.aio.AioRpcError as error:
                    if self.resume_at is None:
                        raise
                    self.breaks.append((self.last, error.code().name))
                    address = self.resume_at

    def _take(self, events: Any) -> None:
        for event in events:
            if event.HasField("synced"):
                self.synced.append(event.synced)
                self.incarnation = event.synced.incarnation
            if event.HasField("subscription_reset"):
                self.resets += 1
            if event.revision:
                self.events.append(event.SerializeToString())
                self.revisions.append(event.revision)

    async def reached(self, revision: int) -> None:
        async def probe() -> bool:
            if self.task is not None and self.task.done():
                self.task.result()  # its failure, raised here
                raise AssertionError(f"{self.name} stopped")
            return self.last >= revision

        await until(probe, f"{self.name} at revision {revision}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def up_to(self, revision: int) -> list[bytes]:
        return [e for e, r in zip(self.events, self.revisions, strict=True) if r <= revision]


async def replay(address: str, until_revision: int) -> list[bytes]:
    """A fresh subscription's events from revision 0 to `until_revision`, serialized."""
    replayed = Subscriber(f"replay at {address}", address).start()
    try:
        await replayed.reached(until_revision)
    finally:
        await replayed.stop()
    assert replayed.resets == 0 and replayed.revisions[0] == 1
    return replayed.up_to(until_revision)


async def head_of(address: str) -> tuple[str, int]:
    """The incarnation and the head revision a fresh subscription's `synced` names."""
    async with stubs_at(address) as stubs:
        call = stubs.events.Subscribe(event_pb.SubscribeRequest())
        try:
            async for response in call:
                for event in response.events:
                    if event.HasField("synced"):
                        return event.synced.incarnation, event.synced.revision
        finally:
            call.cancel()
    raise AssertionError(f"{address}: no synced")


async def settled_head(cluster: Cluster) -> int:
    """The head once every node names the same one (each has applied the whole stream)."""

    async def probe() -> int | None:
        heads = {await head_of(node.address) for node in cluster.nodes if _alive(node)}
        (_, head), *others = heads
        return head if not others else None

    return await until(probe, "every node at one head")


def _alive(node: Any) -> bool:
    return node.proc is not None and node.proc.poll() is None


def no_gap(subscriber: Subscriber) -> None:
    assert subscriber.resets == 0, f"{subscriber.name} was reset"
    assert all(not synced.reset for synced in subscriber.synced), subscriber.name
    count = len(subscriber.revisions)
    assert subscriber.revisions == list(range(1, count + 1)), f"{subscriber.name}: gap/duplicate"


async def create_on(address: str, tmp_path: Path, name: str) -> str:
    async with stubs_at(address) as stubs:
        agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path), title=name))).agent
        return agent.id


async def prompt(address: str, agent_id: str, text: str) -> None:
    """A SendPrompt to the agent's owner with a client message id of its own."""
    async with stubs_at(address) as stubs:
        request = prompt_request(agent_id, f"/reply {text}")
        request.client_message_id = f"m{next(_message_ids)}"
        await stubs.turns.SendPrompt(request, timeout=TIMEOUT)


async def idle(address: str, agent_id: str) -> None:
    async with stubs_at(address) as stubs:
        request = turn_pb.WaitForIdleRequest(agent_id=agent_id)
        request.timeout.FromSeconds(int(TIMEOUT))
        reply = await stubs.turns.WaitForIdle(request, timeout=TIMEOUT + 5)
        assert reply.status == turn_pb.WAIT_STATUS_IDLE, reply


async def rows_of(address: str, agent_id: str) -> list[bytes]:
    async with stubs_at(address) as stubs:
        request = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=1000)
        page = await stubs.timeline.FetchTimeline(request)
        return [row.SerializeToString() for row in page.rows]


async def prompts_stored(address: str, agent_id: str) -> list[str]:
    """The text of every user prompt in the agent's timeline, in order."""
    async with stubs_at(address) as stubs:
        request = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=1000)
        page = await stubs.timeline.FetchTimeline(request)
    texts = []
    for row in page.rows:
        if row.item.HasField("user_message"):
            texts.append(row.item.user_message.text)
    return texts


def grpcurl(address: str, method: str, body: dict[str, Any]) -> str:
    assert GRPCURL.is_file(), f"grpcurl is missing at {GRPCURL}: install the dev extras"
    done = subprocess.run(
        [str(GRPCURL), "-plaintext", "-d", json.dumps(body), address, method],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    with running_cluster(tmp_path) as running:
        yield running


def subscribers_on(cluster: Cluster, resume: bool = False) -> list[Subscriber]:
    envoy = cluster.through_envoy
    others = [Subscriber(node.name, node.address) for node in cluster.nodes]
    return [Subscriber("envoy", envoy, envoy if resume else None), *others]


async def test_agents_on_every_node_stream_the_same_events_everywhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    subscribers = [s.start() for s in subscribers_on(cluster)]
    owners = {}
    for node in cluster.nodes:
        owners[await create_on(node.address, tmp_path, node.name)] = node.address
    for round_ in range(3):
        for agent_id, owner in owners.items():
            await prompt(owner, agent_id, f"round {round_} for {agent_id}")
    for agent_id, owner in owners.items():
        await idle(owner, agent_id)
    head = await settled_head(cluster)
    incarnations = {(await head_of(node.address))[0] for node in cluster.nodes}
    assert len(incarnations) == 1
    for subscriber in subscribers:
        await subscriber.reached(head)
        await subscriber.stop()
        no_gap(subscriber)
    for index, subscriber in enumerate(subscribers):
        other = cluster.nodes[index % len(cluster.nodes)]
        if other.name == subscriber.name:
            other = cluster.nodes[(index + 1) % len(cluster.nodes)]
        assert subscriber.up_to(head) == await replay(other.address, head), subscriber.name

    envoy = cluster.through_envoy
    async with stubs_at(envoy) as through:
        listed = await through.agents.ListAgents(agent_pb.ListAgentsRequest())
        assert sorted(a.id for a in listed.agents) == sorted(owners)
    for agent_id, owner in owners.items():
        rows = await rows_of(owner, agent_id)
        assert await rows_of(envoy, agent_id) == rows
        assert len(await prompts_stored(owner, agent_id)) == 3

    # grpcurl (server reflection through Envoy) sees what each node answers directly.
    listing = json.loads(grpcurl(envoy, "corral.v1.AgentService/ListAgents", {}))
    assert sorted(a["id"] for a in listing["agents"]) == sorted(owners)
    for agent_id in owners:
        body = {"agent_id": agent_id, "limit": 1000}
        method = "corral.v1.TimelineService/FetchTimeline"
        page = grpcurl(envoy, method, body)
        for node in cluster.nodes:
            assert grpcurl(node.address, method, body) == page, node.name


@dataclass
class Sender:
    """Prompts to one agent's owner, one after another until told to stop; which were
    acknowledged and which failed (those may or may not be stored)."""

    agent_id: str
    owner: str
    acked: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        for number in itertools.count():
            if self.stop.is_set():
                return
            text = f"prompt {number} to {self.agent_id}"
            try:
                await prompt(self.owner, self.agent_id, text)
                self.acked.append(f"/reply {text}")
            except grpc.aio.AioRpcError as error:
                self.failed.append((f"/reply {text}", error.code().name))

    async def stored_once(self) -> None:
        """Every acknowledged prompt is in the timeline exactly once; nothing else is, but for
        failed ones (at most once each)."""
        stored = await prompts_stored(self.owner, self.agent_id)
        assert len(stored) == len(set(stored)), "a prompt stored twice"
        missing = [text for text in self.acked if text not in stored]
        assert not missing, f"acknowledged, not stored: {missing}"
        assert set(stored) <= set(self.acked) | {text for text, _ in self.failed}


async def agents_on_every_node(cluster: Cluster, tmp_path: Path) -> dict[str, str]:
    """An agent created on each node directly: its id and its owner's address."""
    return {await create_on(n.address, tmp_path, n.name): n.address for n in cluster.nodes}


async def everyone_agrees(cluster: Cluster, subscribers: list[Subscriber]) -> int:
    """Once the nodes name one head: every subscriber reached it with no gap, no duplicate and
    no reset, and its events equal a replay from revision 0 on a running node."""
    head = await settled_head(cluster)
    replayed = await replay(next(n for n in cluster.nodes if _alive(n)).address, head)
    for subscriber in subscribers:
        await subscriber.reached(head)
        await subscriber.stop()
        no_gap(subscriber)
        assert subscriber.up_to(head) == replayed, subscriber.name
    return head


async def test_the_stream_leader_killed_mid_stream_loses_and_repeats_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    subscribers = [s.start() for s in subscribers_on(cluster)]
    owners = await agents_on_every_node(cluster, tmp_path)
    senders = [Sender(agent_id, owner) for agent_id, owner in owners.items()]
    running = [asyncio.ensure_future(sender.run()) for sender in senders]

    async def acked(at_least: int) -> bool:
        return all(len(sender.acked) >= at_least for sender in senders)

    await until(lambda: acked(3), "prompts acknowledged before the kill")
    leader = cluster.stream_leader()
    assert leader is not None
    await asyncio.to_thread(cluster.kill_nats, leader)
    before = [len(sender.acked) for sender in senders]
    await until(lambda: acked(max(before) + 3), "prompts acknowledged after the kill")
    assert cluster.stream_leader() not in (None, leader)
    for sender in senders:
        sender.stop.set()
    await asyncio.gather(*running)
    for agent_id, owner in owners.items():
        await idle(owner, agent_id)
    head = await everyone_agrees(cluster, subscribers)
    for sender in senders:
        await sender.stored_once()
    acknowledged = sum(len(sender.acked) for sender in senders)
    failed = sum(len(sender.failed) for sender in senders)
    print(f"stream leader {leader} killed: {acknowledged} prompts acknowledged", end=" ")
    print(f"({sum(before)} before the kill), {failed} failed, head revision {head}")


async def test_a_subscriber_on_a_killed_node_resumes_through_envoy_on_another(
    cluster: Cluster, tmp_path: Path
) -> None:
    envoy = cluster.through_envoy
    victim = cluster.nodes[0]
    on_victim = Subscriber("on the victim", victim.address, resume_at=envoy).start()
    through = [Subscriber(f"envoy {i}", envoy, resume_at=envoy).start() for i in range(4)]
    owners = await agents_on_every_node(cluster, tmp_path)
    for agent_id, owner in owners.items():
        await prompt(owner, agent_id, "before the kill")
        await idle(owner, agent_id)
    head = await settled_head(cluster)
    for subscriber in (on_victim, *through):
        await subscriber.reached(head)
    victim_streams = cluster.active_requests(victim.name)
    await asyncio.to_thread(victim.kill)
    for agent_id, owner in owners.items():
        if owner != victim.address:
            await prompt(owner, agent_id, "after the kill")
            await idle(owner, agent_id)
    await until(lambda: _resumed(on_victim), "the victim's subscriber resumed")
    await everyone_agrees(cluster, [on_victim, *through])
    # One break point, after everything it had seen (an event after `head`, before the kill,
    # too). A resume that Envoy still sent to the dead node (its health check had not ejected
    # it yet) fails at that same point and is tried again: no event in between.
    assert _broke_at_one_point(on_victim) and on_victim.breaks[0][0] >= head, on_victim.breaks
    broken = [s for s in through if s.breaks]
    assert len(broken) == victim_streams, (victim_streams, [s.breaks for s in through])
    assert all(_broke_at_one_point(s) for s in broken), [s.breaks for s in broken]


def _broke_at_one_point(subscriber: Subscriber) -> bool:
    points = {revision for revision, _ in subscriber.breaks}
    return len(points) == 1 and len(subscriber.breaks) <= 3


async def _resumed(subscriber: Subscriber) -> bool:
    return bool(subscriber.breaks) and len(subscriber.synced) >= 2


async def test_a_killed_node_started_again_catches_up_and_runs_its_agents_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A crashed node's process started again at once (as compose's `restart: on-failure`
    does): it catches up from its stored position and takes its own agents back once their
    leases (held by its dead process) expire, within a lease duration and the skew margin."""
    victim = cluster.nodes[0]
    agent_id = await create_on(victim.address, tmp_path, "on the victim")
    await prompt(victim.address, agent_id, "before the kill")
    await idle(victim.address, agent_id)
    await asyncio.to_thread(victim.kill)
    other = cluster.nodes[1].address
    others_agent = await create_on(other, tmp_path, "while it is down")
    await prompt(other, others_agent, "while the victim is down")
    await idle(other, others_agent)
    await asyncio.to_thread(victim.restart)
    head = await settled_head(cluster)
    assert await replay(victim.address, head) == await replay(other, head)

    async def prompted_again() -> bool:
        try:
            await prompt(victim.address, agent_id, "after the restart")
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            return False
        return True

    await until(prompted_again, "the restarted node's agent taking a prompt")
    await idle(victim.address, agent_id)
    assert (await prompts_stored(victim.address, agent_id))[-1] == "/reply after the restart"


async def test_a_resume_on_a_node_behind_the_revision_waits_for_it_instead_of_a_reset(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A client that saw revision R on one node and resumes on another that has not applied R
    yet (it lags behind the stream) gets R+1 on once that node has it, not a reset: in a
    cluster a head behind the client's revision is a lag, not another event log."""
    ahead, behind = cluster.nodes[0], cluster.nodes[1]
    watcher = Subscriber("on the node ahead", ahead.address).start()
    agent_id = await create_on(ahead.address, tmp_path, "ahead")
    await idle(ahead.address, agent_id)
    behind.pause()
    try:
        await prompt(ahead.address, agent_id, "while the other node is paused")
        await idle(ahead.address, agent_id)
        _, head = await head_of(ahead.address)
        await watcher.reached(head)
        resumed = Subscriber("resumed behind", behind.address)
        resumed.revisions, resumed.incarnation = [head], watcher.incarnation
        resumed.start()
        await asyncio.sleep(0)  # the call is on its way before the node runs again
    finally:
        behind.resume()
    await prompt(ahead.address, agent_id, "after")
    await idle(ahead.address, agent_id)
    final = await settled_head(cluster)
    await resumed.reached(final)
    await watcher.reached(final)
    for subscriber in (watcher, resumed):
        await subscriber.stop()
    assert resumed.resets == 0 and not any(s.reset for s in resumed.synced), "reset"
    # Later events (another test's agents settling on this cluster) may follow `final`.
    count = final - head + 1
    assert resumed.revisions[:count] == list(range(head, final + 1))
    assert resumed.events[: count - 1] == watcher.up_to(final)[head:]
