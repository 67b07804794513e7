"""The Node.js client (clients/node/subscribe.js) against the real daemon: it sees the same
events, in the same order, as a Python subscriber.

Needs `node` on PATH and `npm ci` run in clients/node; without them these tests fail (they
never skip).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread

NODE_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
SUBSCRIBE_JS = NODE_DIR / "subscribe.js"
# Generous: a 2-core machine running the suite in parallel starts node slowly.
TIMEOUT = 60.0
TERMINAL = ("turn_completed", "turn_failed", "turn_canceled")

Summary = tuple[int, str, str, Any]


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not on PATH: install Node.js >= 18, then run `npm ci` in clients/node")
    for package in ("@grpc/grpc-js", "@grpc/proto-loader"):
        if not (NODE_DIR / "node_modules" / package / "package.json").is_file():
            pytest.fail(f"{package} is missing: run `npm ci` in {NODE_DIR}")
    return path


# --- one event, summarised the same way from either side ------------------------------------


def py_summary(event: event_pb.Event) -> Summary:
    kind = event.WhichOneof("payload") or ""
    body: Any = getattr(event, kind) if kind else None
    agent_id, detail = "", None
    if kind == "agent_upserted":
        agent_id, detail = body.agent.id, body.agent.lifecycle.WhichOneof("state")
    elif kind == "timeline_row_appended":
        item = body.row.item
        item_kind = item.WhichOneof("kind")
        text = getattr(getattr(item, item_kind), "text", "")
        agent_id, detail = body.agent_id, (body.epoch, body.row.seq, item_kind, text)
    elif kind in (*TERMINAL, "turn_started"):
        agent_id, detail = body.agent_id, body.turn_id
    elif kind == "synced":
        detail = body.revision
    elif body is not None and hasattr(body, "agent_id"):
        agent_id = body.agent_id
    return (event.revision, kind, agent_id, detail)


def node_summary(event: dict[str, Any]) -> Summary:
    kind = event.get("payload") or ""
    body = event.get(kind) or {}
    agent_id, detail = "", None
    if kind == "agent_upserted":
        agent_id, detail = body["agent"]["id"], body["agent"]["lifecycle"]["state"]
    elif kind == "timeline_row_appended":
        item = body["row"]["item"]
        item_kind = item["kind"]
        text = item[item_kind].get("text", "")
        agent_id, detail = (
            body["agent_id"],
            (body["epoch"], int(body["row"]["seq"]), item_kind, text),
        )
    elif kind in (*TERMINAL, "turn_started"):
        agent_id, detail = body["agent_id"], body["turn_id"]
    elif kind == "synced":
        detail = int(body["revision"])
    else:
        agent_id = body.get("agent_id", "")
    return (int(event["revision"]), kind, agent_id, detail)


# --- the two subscribers --------------------------------------------------------------------


class PySubscriber:
    """EventService.Subscribe over grpc.aio; events arrive in a queue, one Event each."""

    def __init__(self, stubs: Stubs, request: event_pb.SubscribeRequest) -> None:
        self.call = stubs.events.Subscribe(request)
        self.queue: asyncio.Queue[event_pb.Event] = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for response in self.call:
            for event in response.events:
                self.queue.put_nowait(event)

    async def next(self) -> event_pb.Event:
        get = asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait(
            {get, self.task}, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if get not in done:
            get.cancel()
            raise AssertionError(
                f"python subscriber got no event (stream ended: {self.task.done()})"
            )
        return get.result()

    async def until_synced(self) -> int:
        while (event := await self.next()).WhichOneof("payload") != "synced":
            pass
        return event.synced.revision

    async def until(self, done: Any) -> list[event_pb.Event]:
        """Every event up to and including the first one for which done(event) is true."""
        events = [await self.next()]
        while not done(events[-1]):
            events.append(await self.next())
        return events

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
            await self.task


class NodeSubscriber:
    """`node subscribe.js` as a subprocess; its stdout lines are its events."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, node: str, address: str, *args: str) -> NodeSubscriber:
        proc = await asyncio.create_subprocess_exec(
            node, str(SUBSCRIBE_JS), address, *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        subscriber = cls(proc)
        assert proc.stderr is not None
        ready = await asyncio.wait_for(proc.stderr.readline(), TIMEOUT)
        if ready != b"READY\n":
            await subscriber.fail(f"expected READY on stderr, got {ready!r}")
        return subscriber

    async def next(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
        if not line:
            await self.fail("node subscriber ended its output early")
        event: dict[str, Any] = json.loads(line)
        return event

    async def until_synced(self) -> int:
        while (event := await self.next())["payload"] != "synced":
            pass
        return int(event["synced"]["revision"])

    async def until_revision(self, revision: int) -> list[dict[str, Any]]:
        events = [await self.next()]
        while int(events[-1]["revision"]) < revision:
            events.append(await self.next())
        return events

    async def stop(self) -> int:
        """SIGTERM: the subscriber cancels its call and exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), TIMEOUT)

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.communicate()

    async def fail(self, message: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        _, err = await asyncio.wait_for(self.proc.communicate(), TIMEOUT)
        pytest.fail(f"{message}; exit {self.proc.returncode}; stderr: {err.decode()}")


async def run_node(node: str, address: str, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """Run subscribe.js to its own exit: (exit code, events, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        node, str(SUBSCRIBE_JS), address, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    events = [json.loads(line) for line in out.decode().splitlines()]
    return proc.returncode, events, err.decode()


# --- activity -------------------------------------------------------------------------------


async def run_turn(
    stubs: Stubs, sub: PySubscriber, agent_id: str, *lines: str
) -> list[event_pb.Event]:
    """Send a prompt and return what `sub` saw up to the turn's terminal event."""
    turn_id = (await stubs.turns.SendPrompt(prompt_request(agent_id, *lines))).turn_id

    def terminal(event: event_pb.Event) -> bool:
        kind = event.WhichOneof("payload")
        return kind in TERMINAL and getattr(event, kind).turn_id == turn_id

    return await sub.until(terminal)


async def two_agents_and_three_turns(
    stubs: Stubs, sub: PySubscriber, cwd: Path
) -> list[event_pb.Event]:
    """Everything `sub` saw up to the last turn's terminal event."""
    first = (await stubs.agents.CreateAgent(create_request(str(cwd), title="one"))).agent.id
    second = (await stubs.agents.CreateAgent(create_request(str(cwd), title="two"))).agent.id
    events = await run_turn(stubs, sub, first, "hello")
    events += await run_turn(stubs, sub, second, "/think pondering", "/reply hi there")
    events += await run_turn(stubs, sub, first, "hello again")
    return events


def live(summaries: list[Summary], after: int) -> list[Summary]:
    return [s for s in summaries if s[0] > after]


# --- tests ----------------------------------------------------------------------------------


async def test_node_subscriber_sees_the_same_live_events_in_the_same_order_as_python(
    node: str, grpc_server: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    node_sub = await NodeSubscriber.start(node, grpc_server.address)
    py_sub = PySubscriber(stubs, event_pb.SubscribeRequest())
    try:
        py_synced, node_synced = await asyncio.gather(
            py_sub.until_synced(), node_sub.until_synced()
        )
        start = max(py_synced, node_synced)

        py_events = await two_agents_and_three_turns(stubs, py_sub, tmp_path)
        last = py_events[-1].revision
        node_events = await node_sub.until_revision(last)
        code = await node_sub.stop()
    finally:
        await py_sub.close()
        await node_sub.kill()
    assert code == 0  # SIGTERM ends the subscriber cleanly

    expected = live([py_summary(e) for e in py_events], start)
    got = live([node_summary(e) for e in node_events], start)
    assert got == expected
    kinds = [s[1] for s in expected]
    assert kinds.count("turn_started") == 3 and kinds[-1] == "turn_completed"
    texts = [s[3][3] for s in expected if s[1] == "timeline_row_appended"]
    assert "You said: hello" in texts and "pondering" in texts and "hi there" in texts
    assert len({s[2] for s in expected}) == 2


async def test_node_subscriber_resumed_from_a_revision_replays_exactly_the_missed_events(
    node: str, grpc_server: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    py_sub = PySubscriber(stubs, event_pb.SubscribeRequest())
    try:
        start = await py_sub.until_synced()
        py_events = await two_agents_and_three_turns(stubs, py_sub, tmp_path)
        code, node_events, err = await run_node(
            node, grpc_server.address, "--resume-revision", str(start), "--until-synced-then", "0"
        )
        assert code == 0, err
        replayed, synced = node_events[:-1], node_summary(node_events[-1])
        assert synced[1] == "synced" and synced[3] > start
        # Python has seen everything up to the head the replay caught up to.
        if py_events[-1].revision < synced[3]:
            py_events += await py_sub.until(lambda e: e.revision >= synced[3])
    finally:
        await py_sub.close()
    assert [node_summary(e) for e in replayed] == [py_summary(e) for e in py_events]


async def test_node_subscriber_exits_after_max_events(
    node: str, grpc_server: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    py_sub = PySubscriber(stubs, event_pb.SubscribeRequest())
    try:
        start = await py_sub.until_synced()
        py_events = await two_agents_and_three_turns(stubs, py_sub, tmp_path)
    finally:
        await py_sub.close()
    code, node_events, err = await run_node(
        node, grpc_server.address, "--resume-revision", str(start), "--max-events", "3"
    )
    assert code == 0, err
    assert [node_summary(e) for e in node_events] == [py_summary(e) for e in py_events[:3]]


async def test_node_subscriber_scoped_to_one_agent_gets_its_snapshot_then_synced(
    node: str, grpc_server: DaemonThread, aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    wanted = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    await stubs.agents.CreateAgent(create_request(str(tmp_path)))
    code, node_events, err = await run_node(
        node, grpc_server.address, "--agent", wanted.id, "--until-synced-then", "0"
    )
    assert code == 0, err
    assert [e["payload"] for e in node_events] == ["agent_upserted", "synced"]
    agent = node_events[0]["agent_upserted"]["agent"]
    assert (agent["id"], agent["provider"], agent["cwd"]) == (wanted.id, "scripted", str(tmp_path))
    assert agent["lifecycle"]["state"] == "idle"
    assert agent["timeline"]["epoch"] == wanted.timeline.epoch
    assert node_events[0]["revision"] == "0"  # snapshot entries carry revision 0


async def test_node_subscriber_reports_a_rejected_subscription_and_exits_1(
    node: str, grpc_server: DaemonThread
) -> None:
    code, node_events, err = await run_node(
        node, grpc_server.address, "--agent", "a", "--agent", "a"
    )
    assert code == 1
    assert node_events == []
    assert "Subscribe failed: INVALID_ARGUMENT" in err
