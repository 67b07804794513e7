"""The balancer failover (README, Deploying): the real Envoy (deploy/envoy.yaml) in front of
a serving `corral serve` and a `corral serve --standby` on one state directory, every client
going through Envoy only (Python stubs, and grpcurl once the standby serves). Senders and
subscribers run continuously while the serving daemon is stopped:

* SIGTERM (the graceful drain): every subscriber's stream ends with `stream_ending`, and it
  resumes through Envoy from that revision and incarnation;
* SIGKILL: the standby takes over the state directory, and every subscriber resumes from the
  last revision it saw.

Then every acknowledged prompt is stored exactly once, and every subscriber holds exactly the
events a subscriber that never disconnected would have: those of a full replay from revision 0
after its first `synced`, under the same revisions, byte for byte.

The clients behave like real ones: a failed call is counted and retried after a short back-off
(UNAVAILABLE while no daemon is in rotation, CANCELLED for a call that reached a daemon as it
stopped), and a prompt whose send failed without a refusal is looked up in its agent's timeline
by client_message_id before it is sent again (a send can fail after the prompt was stored).
The test prints the switch time and the failed calls (deploy/README.md keeps them).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf import duration_pb2

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonProcess
from tests.support.envoy import Envoy, running_envoy

T = TypeVar("T")

TIMEOUT = 60.0  # generous: a 2-core machine running the suite in parallel is slow
# A client's back-off after a failed call (gRPC's own starts at 1 s; a balancer client that
# knows the switch takes about a second retries sooner). The failed-call counts depend on it.
RETRY_S = 0.05
AGENTS = 3
ACKS = 3  # prompts each sender has acknowledged before the stop, and again after the switch
# The daemons' drain delay: longer than Envoy's check interval (0.5 s), so the stopping daemon
# is out of rotation before it refuses new work. The default (3 s) only makes the test slower.
DRAIN_DELAY = ("--drain-delay-s", "1")
# What a client retries: UNAVAILABLE (no daemon in rotation, a draining or waiting daemon, a
# connection lost), and CANCELLED, which it did not cause: a call that reaches a daemon as its
# gRPC server stops (the end of the drain) is cancelled there before any handler runs.
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class Switch:
    """The clients' view of one failover: the signal, the old daemon's exit, the first call
    the new daemon answered, and every failed call."""

    def __init__(self) -> None:
        self.signalled = 0.0
        self.exited = 0.0  # 0: not yet
        self.back = 0.0  # the first call started after the exit to succeed; 0: none yet
        self.first_failure = 0.0
        self.failures: Counter[str] = Counter()

    def failed(self, what: str, error: grpc.aio.AioRpcError) -> None:
        self.failures[f"{what} {error.code().name}"] += 1
        if not self.first_failure:
            self.first_failure = time.monotonic()

    def answered(self, started: float) -> None:
        if self.exited and started >= self.exited and not self.back:
            self.back = time.monotonic()

    def report(self, name: str) -> str:
        total = sum(self.failures.values())
        outage = self.back - self.first_failure if self.first_failure else 0.0
        return (
            f"failover {name}: switch {self.back - self.signalled:.2f} s from the signal to the "
            f"first call the standby answered ({self.back - self.exited:.2f} s after the old "
            f"daemon exited; calls failing for {outage:.2f} s); {total} failed client calls, "
            f"retried every {RETRY_S * 1000:.0f} ms: {dict(sorted(self.failures.items()))}"
        )


@dataclass
class Subscriber:
    agent_ids: tuple[str, ...]  # empty: every agent
    incarnation: str = ""
    start: int = 0  # the revision of its first `synced`: every later event is expected
    last: int = 0  # the last revision received
    events: list[tuple[int, bytes]] = field(default_factory=list)
    syncs: int = 0
    endings: list[int] = field(default_factory=list)  # stream_ending resume revisions


class Traffic:
    """The clients: what they were told, their tasks, and a wake-up for whoever waits on them.
    Leaving it (`async with`) cancels every client still running."""

    def __init__(self) -> None:
        self.switch = Switch()
        self.agent_ids: list[str] = []
        self.subscribers: list[Subscriber] = []
        self.acked: dict[str, list[str]] = {}  # agent id -> client_message_ids acknowledged
        self.acked_after: Counter[str] = Counter()  # acknowledged after the old daemon exited
        self.stop = asyncio.Event()  # senders stop after their current prompt
        self.changed = asyncio.Event()
        self.readers: list[asyncio.Task[None]] = []
        self.senders: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Traffic:
        return self

    async def __aexit__(self, *_: object) -> None:
        tasks = self.readers + self.senders
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def start(self, into: list[asyncio.Task[None]], coro: Coroutine[None, None, None]) -> None:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(lambda _: self.changed.set())
        into.append(task)

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait until `condition` holds; a client that failed fails the wait."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            for task in self.readers + self.senders:
                if task.done() and not task.cancelled() and task.exception():
                    raise AssertionError(f"a client failed before {what}") from task.exception()
            if condition():
                return
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                raise AssertionError(f"never saw {what}") from None


async def retried(traffic: Traffic, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call` until it succeeds: a failure in RETRIED is counted and retried after the
    back-off."""
    while True:
        started = time.monotonic()
        try:
            result = await call()
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRIED:
                raise
            traffic.switch.failed(what, error)
            await asyncio.sleep(RETRY_S)
            continue
        traffic.switch.answered(started)
        return result


async def stored_prompts(stubs: Stubs, traffic: Traffic, agent_id: str) -> list[str]:
    """The client_message_ids of the agent's stored prompts, in timeline order."""
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    page = await retried(
        traffic, "FetchTimeline", lambda: stubs.timeline.FetchTimeline(request, timeout=TIMEOUT)
    )
    return [r.item.user_message.client_message_id for r in page.rows if r.item.user_message.text]


def never_stored(error: grpc.aio.AioRpcError) -> bool:
    """A refusal that says the prompt was not stored: Envoy had no daemon in rotation, or a
    daemon refused it (draining, or waiting as a standby)."""
    if "no healthy upstream" in (error.details() or ""):
        return True
    return error_details(error).reason in ("SHUTTING_DOWN", "STANDBY")


async def send(stubs: Stubs, traffic: Traffic, agent_id: str, n: int) -> None:
    """One prompt, acknowledged or found stored; then wait until the agent is idle again."""
    message_id = f"{agent_id[:8]}-{n}"
    request = prompt_request(agent_id, f"prompt {message_id}", client_message_id=message_id)
    while True:
        started = time.monotonic()
        try:
            await stubs.turns.SendPrompt(request, timeout=TIMEOUT)
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRIED:
                raise
            traffic.switch.failed("SendPrompt", error)
            await asyncio.sleep(RETRY_S)
            if never_stored(error):
                continue
            if message_id in await stored_prompts(stubs, traffic, agent_id):
                break  # stored, never acknowledged: sending it again would double it
            continue
        traffic.switch.answered(started)
        traffic.acked.setdefault(agent_id, []).append(message_id)
        if traffic.switch.exited and started >= traffic.switch.exited:
            traffic.acked_after[agent_id] += 1
        traffic.changed.set()
        break
    idle = turn_pb.WaitForIdleRequest(agent_id=agent_id, timeout=duration_pb2.Duration(seconds=30))
    await retried(traffic, "WaitForIdle", lambda: stubs.turns.WaitForIdle(idle, timeout=TIMEOUT))


async def sender(stubs: Stubs, traffic: Traffic, agent_id: str) -> None:
    n = 0
    while not traffic.stop.is_set():
        n += 1
        await send(stubs, traffic, agent_id, n)


async def subscribe(stubs: Stubs, traffic: Traffic, sub: Subscriber) -> None:
    """Subscribe for good: after a `stream_ending` resume from its revision, after a lost
    stream from the last revision received, each time with the incarnation."""
    request = event_pb.SubscribeRequest(agent_ids=sub.agent_ids)
    while True:
        started = time.monotonic()
        call = stubs.events.Subscribe(request)
        resume_at = -1
        try:
            async for response in call:
                for event in response.events:
                    resume_at = max(resume_at, receive(sub, event))
                    if event.HasField("synced"):
                        traffic.switch.answered(started)
                traffic.changed.set()
        except grpc.aio.AioRpcError as error:
            traffic.switch.failed("Subscribe", error)
            await asyncio.sleep(RETRY_S)
        if resume_at < 0:
            resume_at = sub.last
        request = event_pb.SubscribeRequest(
            agent_ids=sub.agent_ids, resume_revision=resume_at, resume_incarnation=sub.incarnation
        )


def receive(sub: Subscriber, event: event_pb.Event) -> int:
    """Take one event; the resume revision of a `stream_ending`, else -1."""
    kind = event.WhichOneof("payload")
    assert kind != "subscription_reset", "a resume was reset: the event log lost its place"
    if kind == "synced":
        synced = event.synced
        assert not synced.reset
        if not sub.incarnation:
            sub.incarnation = synced.incarnation
            sub.start = sub.last = synced.revision
        assert synced.incarnation == sub.incarnation, "the standby has another event log"
        sub.syncs += 1
    elif kind == "stream_ending":
        ending = event.stream_ending
        assert ending.incarnation == sub.incarnation and ending.resume_revision >= sub.last
        sub.endings.append(ending.resume_revision)
        return int(ending.resume_revision)
    elif event.revision:
        assert event.revision > sub.last, f"revision {event.revision} after {sub.last}"
        sub.events.append((event.revision, event.SerializeToString()))
        sub.last = event.revision
    return -1


def agent_of(event: event_pb.Event) -> str:
    if event.HasField("agent_upserted"):
        return str(event.agent_upserted.agent.id)
    return str(getattr(event, str(event.WhichOneof("payload"))).agent_id)


async def full_replay(stubs: Stubs, traffic: Traffic, incarnation: str) -> list[event_pb.Event]:
    """Every event from revision 1 to the head, replayed from the store."""

    async def replay() -> list[event_pb.Event]:
        request = event_pb.SubscribeRequest(resume_revision=0, resume_incarnation=incarnation)
        call = stubs.events.Subscribe(request, timeout=TIMEOUT)
        events: list[event_pb.Event] = []
        async for response in call:
            for event in response.events:
                assert not event.HasField("subscription_reset")
                if event.HasField("synced"):
                    call.cancel()
                    assert [e.revision for e in events] == list(range(1, event.synced.revision + 1))
                    return events
                events.append(event)
        raise AssertionError("the replay ended before synced")

    return await retried(traffic, "Subscribe", replay)


class Output:
    """A daemon's stderr read by a thread (a full pipe would stall the daemon): its lines."""

    def __init__(self, process: DaemonProcess) -> None:
        assert process.proc is not None and process.proc.stderr is not None
        self.lines: list[str] = []
        self._process = process
        self._thread = threading.Thread(target=self.lines.extend, args=(process.proc.stderr,))
        self._thread.start()

    def close(self) -> None:
        """After the daemon ended: the rest of its output, and its pipes closed."""
        proc = self._process.proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        self._thread.join(TIMEOUT)
        proc.stdout.close()
        proc.stderr.close()


def grpcurl_get_agent(envoy: Envoy, agent_id: str) -> dict[str, Any]:
    """GetAgent by grpcurl through Envoy, with the daemon's reflection (no .proto files)."""
    grpcurl = Path(sys.executable).parent / "grpcurl"
    body = json.dumps({"agent_id": agent_id})
    args = [str(grpcurl), "-plaintext", "-d", body, envoy.listener]
    done = subprocess.run(
        [*args, "corral.v1.AgentService/GetAgent"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    reply: dict[str, Any] = json.loads(done.stdout)
    return reply


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_clients_through_envoy_lose_and_double_nothing_when_the_serving_daemon_stops(
    tmp_path: Path, stop: signal.Signals
) -> None:
    state = tmp_path / "state"
    quiet = ("--log-level", "WARNING")
    serving = DaemonProcess(state, *DRAIN_DELAY, *quiet).start()
    standby = DaemonProcess(state, "--standby", *DRAIN_DELAY, *quiet).start(expect_ready=False)
    outputs = (Output(serving), Output(standby))
    try:
        assert standby.proc is not None and standby.proc.stdout is not None
        waiting = standby.proc.stdout.readline()  # "corral standby on HOST:PORT (...)"
        assert "corral standby on" in waiting, waiting
        standby_port = int(waiting.split()[3].rsplit(":", 1)[1])
        serving_port = int(serving.address.rsplit(":", 1)[1])
        with running_envoy(tmp_path, serving_port, standby_port) as envoy:
            await envoy.until_health(serving_port, "healthy")
            await envoy.until_health(standby_port, "/failed_active_hc")
            async with (
                Traffic() as traffic,
                grpc.aio.insecure_channel(envoy.listener) as channel,
            ):
                stubs = Stubs.of(channel)
                await fail_over(stubs, traffic, serving, stop)
                await check(stubs, traffic, envoy)
                print(traffic.switch.report(stop.name))
    finally:
        serving.stop()
        standby.stop()
        for name, output in zip(("serving", "standby"), outputs, strict=True):
            output.close()
            if output.lines:
                print(f"{name} daemon's log:", *output.lines, sep="\n")


async def fail_over(
    stubs: Stubs, traffic: Traffic, serving: DaemonProcess, stop: signal.Signals
) -> None:
    """Traffic through Envoy; `stop` the serving daemon; wait until every client is back and
    the senders stopped with their agents idle."""
    traffic.subscribers = [Subscriber(()), Subscriber(())]
    for sub in traffic.subscribers:
        traffic.start(traffic.readers, subscribe(stubs, traffic, sub))
    await traffic.until(lambda: all(s.syncs for s in traffic.subscribers), "subscribers synced")
    for _ in range(AGENTS):
        created = await stubs.agents.CreateAgent(create_request("/tmp"), timeout=TIMEOUT)
        traffic.agent_ids.append(created.agent.id)
    traffic.subscribers.append(Subscriber((traffic.agent_ids[0],)))  # one agent's events
    traffic.start(traffic.readers, subscribe(stubs, traffic, traffic.subscribers[-1]))
    for agent_id in traffic.agent_ids:
        traffic.start(traffic.senders, sender(stubs, traffic, agent_id))
    await traffic.until(
        lambda: all(len(traffic.acked.get(a, ())) >= ACKS for a in traffic.agent_ids),
        "prompts acknowledged",
    )

    assert serving.proc is not None
    traffic.switch.signalled = time.monotonic()
    serving.proc.send_signal(stop)
    code = await asyncio.to_thread(serving.proc.wait, TIMEOUT)
    traffic.switch.exited = time.monotonic()
    assert code == (0 if stop == signal.SIGTERM else -signal.SIGKILL)
    await traffic.until(
        lambda: (
            all(traffic.acked_after[a] >= ACKS for a in traffic.agent_ids)
            and all(s.syncs >= 2 for s in traffic.subscribers)
        ),
        "every client back, through the standby",
    )
    if stop == signal.SIGTERM:  # the drain ended every stream with its resume point
        assert all(s.endings for s in traffic.subscribers)
    traffic.stop.set()
    await asyncio.wait_for(asyncio.gather(*traffic.senders), TIMEOUT)


async def check(stubs: Stubs, traffic: Traffic, envoy: Envoy) -> None:
    """Nothing lost, nothing twice: each subscriber against a full replay, each agent's stored
    prompts against the acknowledged ones."""
    reply = await asyncio.to_thread(grpcurl_get_agent, envoy, traffic.agent_ids[0])
    assert reply["agent"]["id"] == traffic.agent_ids[0]
    events = await full_replay(stubs, traffic, traffic.subscribers[0].incarnation)
    head = events[-1].revision if events else 0
    for sub in traffic.subscribers:
        expected = [
            (e.revision, e.SerializeToString())
            for e in events
            if e.revision > sub.start and (not sub.agent_ids or agent_of(e) in sub.agent_ids)
        ]
        last = expected[-1][0] if expected else 0
        await traffic.until(partial(lambda s, n: s.last >= n, sub, last), "the head")
        got = [(revision, body) for revision, body in sub.events if revision <= head]
        assert [r for r, _ in got] == [r for r, _ in expected], "an event lost or doubled"
        assert got == expected, "an event's bytes differ from the stored ones"
    for agent_id in traffic.agent_ids:
        stored = Counter(await stored_prompts(stubs, traffic, agent_id))
        assert not [m for m, n in stored.items() if n > 1], "a prompt stored twice"
        assert all(stored[m] == 1 for m in traffic.acked[agent_id]), "an acked prompt lost"
