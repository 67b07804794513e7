"""The TypeScript client (clients/typescript: the stubs protoc-gen-es generates, driven by
@connectrpc/connect-node) against the real daemon: Node subscribers through the gRPC transport
(the gRPC port, HTTP/2) and through the Connect transport (the web port, HTTP/1.1, binary and
JSON) receive exactly the events the generated Python client receives, over a scenario
that interleaves two agents' turns, a tool call, a permission, a rewind and a reload (each a new
epoch) and hostile text. Node prints each Event as base64 of its binary encoding; the test
decodes them into corral.v1 messages and compares them with Python's (protobuf equality).

Needs `node` on PATH and `npm ci` run in clients/typescript; without them these tests fail
(they never skip).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as timeline_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests import conftest
from tests.support.client import Stubs, create_request, next_message, prompt_request
from tests.support.daemon import DaemonThread

TS_DIR = Path(__file__).resolve().parents[2] / "clients" / "typescript"
SUBSCRIBE_JS = TS_DIR / "examples" / "subscribe.js"
# Generous: a 2-core machine running the suite in parallel starts node slowly.
TIMEOUT = 60.0
TERMINAL = ("turn_completed", "turn_failed", "turn_canceled")
# Text no protobuf library may mangle: non-ASCII in three scripts, an emoji outside the BMP, a
# right-to-left override, NUL and other control characters, quotes, backslashes, markup.
HOSTILE = 'naïve 日本語 עברית 🦀 \u202etxt.exe\u202c NUL:\x00 tab:\t "q" \\b <script>&amp;'

PACKAGES = ("@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node", "typescript")

Event = event_pb.Event


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not on PATH: install Node.js >= 20, then npm ci in clients/typescript")
    for package in PACKAGES:
        if not (TS_DIR / "node_modules" / package / "package.json").is_file():
            pytest.fail(f"{package} is missing: run `npm ci --prefix {TS_DIR}`")
    return path


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonThread]:
    config = replace(conftest.test_config(), web_listen="127.0.0.1:0")
    thread = DaemonThread(config).start()
    yield thread
    thread.stop()


@pytest.fixture
async def stubs(daemon: DaemonThread) -> Any:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        yield Stubs.of(channel)


# --- the subscribers ------------------------------------------------------------------------


class PySubscriber:
    """EventService.Subscribe through the generated Python client, every agent."""

    def __init__(self, stubs: Stubs, request: event_pb.SubscribeRequest) -> None:
        self.call = stubs.events.Subscribe(request)
        self.seen: list[Event] = []
        self._unread: list[Event] = []

    async def until(self, done: Callable[[Event], bool]) -> Event:
        """Read until an event for which `done` is true; that event (all are in `seen`)."""
        while True:
            while self._unread:
                event = self._unread.pop(0)
                self.seen.append(event)
                if done(event):
                    return event
            response = await asyncio.wait_for(next_message(self.call), TIMEOUT)
            self._unread.extend(response.events)

    def close(self) -> None:
        self.call.cancel()


class NodeSubscriber:
    """`node examples/subscribe.js` as a subprocess: each stdout line is one Event, or with
    --fetch-timeline, `page:` and a FetchTimelineResponse."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc = proc
        self.name = name
        self.seen: list[Event] = []
        self.pages: list[timeline_pb.FetchTimelineResponse] = []

    def take(self, line: bytes) -> None:
        """One line of its output, into `pages` or `seen`."""
        line = line.rstrip(b"\n")
        if line.startswith(b"page:"):
            data = base64.b64decode(line.removeprefix(b"page:"), validate=True)
            self.pages.append(timeline_pb.FetchTimelineResponse.FromString(data))
        else:
            self.seen.append(Event.FromString(base64.b64decode(line, validate=True)))

    @classmethod
    async def start(cls, node: str, url: str, *args: str) -> NodeSubscriber:
        # stdin is its lifeline: if this test dies, the subscriber exits too.
        proc = await asyncio.create_subprocess_exec(
            node, str(SUBSCRIBE_JS), url, "--until-stdin-ends", *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc, " ".join(args) or "grpc")

    async def next(self) -> Event:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
        if not line:
            await self.fail("ended its output early")
        count = len(self.seen)
        self.take(line)
        return self.seen[-1] if len(self.seen) > count else await self.next()

    async def until(self, done: Callable[[Event], bool]) -> Event:
        while not done(event := await self.next()):
            pass
        return event

    async def stop(self) -> None:
        """Close its stdin: it cancels its call and must exit 0 with nothing on stderr."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        out, err = await asyncio.wait_for(self.proc.communicate(), TIMEOUT)
        assert (self.proc.returncode, err.decode()) == (0, ""), self.name
        for line in out.splitlines():
            self.take(line)

    async def run_to_exit(self) -> tuple[int, str]:
        """Wait for it to exit by itself (stdin stays open): (exit code, stderr)."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out, err = await asyncio.wait_for(
            asyncio.gather(self.proc.stdout.read(), self.proc.stderr.read()), TIMEOUT
        )
        code = await asyncio.wait_for(self.proc.wait(), TIMEOUT)
        for line in out.splitlines():
            self.take(line)
        return code, err.decode()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.communicate()

    async def fail(self, message: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        _, err = await asyncio.wait_for(self.proc.communicate(), TIMEOUT)
        pytest.fail(f"node ({self.name}) {message}; exit {self.proc.returncode}: {err.decode()}")


async def a_page_as_python_fetches_it(
    stubs: Stubs, cwd: Path, start: Callable[[str], Awaitable[list[NodeSubscriber]]]
) -> None:
    """An agent with hostile rows and a tool call; each subscriber `start(agent_id)` makes
    prints its FetchTimeline page (TAIL, 50), which must equal Python's for the same request."""
    agent = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent
    for lines in [("/echo", f"/think {HOSTILE}", '/tool read {"n": 9007199254740993}'), (HOSTILE,)]:
        await stubs.turns.SendPrompt(prompt_request(agent.id, *lines))
        await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
    request = timeline_pb.FetchTimelineRequest(
        agent_id=agent.id, direction=timeline_pb.TIMELINE_DIRECTION_TAIL, limit=50
    )
    page = await stubs.timeline.FetchTimeline(request)
    assert len(page.rows) >= 4 and any(r.item.HasField("tool_call") for r in page.rows)
    subs = await start(agent.id)
    try:
        ends = await asyncio.gather(*(sub.run_to_exit() for sub in subs))
    finally:
        for sub in subs:
            await sub.kill()
    for sub, end in zip(subs, ends, strict=True):
        assert end == (0, ""), sub.name
        assert sub.pages == [page], sub.name
    # A deliberate mismatch fails the comparison: one character of one row's text.
    altered = timeline_pb.FetchTimelineResponse.FromString(page.SerializeToString())
    next(r for r in altered.rows if r.item.HasField("tool_call")).item.tool_call.name += "!"
    assert altered != page


def subscribers(daemon: DaemonThread) -> list[tuple[str, ...]]:
    """(url, args...) of each Node subscriber to compare with Python: gRPC on the gRPC port,
    and the Connect protocol on the web port, binary and JSON."""
    assert daemon.daemon is not None
    web = f"http://127.0.0.1:{daemon.daemon.web_port}"
    return [
        (f"http://{daemon.address}", "--transport", "grpc"),
        (web, "--transport", "connect"),
        (web, "--transport", "connect", "--json"),
    ]


def synced(event: Event) -> bool:
    return event.HasField("synced")


def terminal_of(turn_id: str) -> Callable[[Event], bool]:
    def check(event: Event) -> bool:
        kind = event.WhichOneof("payload")
        return kind in TERMINAL and getattr(event, kind).turn_id == turn_id

    return check


def kind_is(kind: str, agent_id: str) -> Callable[[Event], bool]:
    def check(event: Event) -> bool:
        return event.WhichOneof("payload") == kind and getattr(event, kind).agent_id == agent_id

    return check


# --- the scenario ---------------------------------------------------------------------------


async def scenario(stubs: Stubs, py: PySubscriber, cwd: Path) -> None:
    """Two agents, interleaved: a tool call with hostile input, a turn on one agent while the
    other waits on a permission, a failed turn, a rewind (new epoch) on one and a reload from
    disk (new epoch) on the other, each followed by a turn in the new epoch."""
    one = (await stubs.agents.CreateAgent(create_request(str(cwd), title=f"one {HOSTILE}"))).agent
    two = (await stubs.agents.CreateAgent(create_request(str(cwd), title="two"))).agent

    async def turn(agent_id: str, *lines: str) -> str:
        turn_id = (await stubs.turns.SendPrompt(prompt_request(agent_id, *lines))).turn_id
        await py.until(terminal_of(turn_id))
        return str(turn_id)

    echoed = await turn(
        one.id, "/echo", f"/think {HOSTILE}", '/tool read {"path": "ü/🦀", "n": 9007199254740993}',
        f"/reply {HOSTILE}", HOSTILE,
    )  # fmt: skip
    asking = (
        await stubs.turns.SendPrompt(prompt_request(two.id, "/permission write", "/reply done"))
    ).turn_id
    asked = await py.until(kind_is("permission_requested", two.id))
    await turn(one.id, "while two waits", "/tool grep {}")
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=two.id,
            request_id=asked.permission_requested.permission.id,
            behavior=turn_pb.PERMISSION_BEHAVIOR_ALLOW,
            selected_action_id="allow",
            message=HOSTILE,
        )
    )
    await py.until(terminal_of(asking))
    await turn(two.id, "/fail it broke: " + HOSTILE)

    await stubs.turns.Rewind(turn_pb.RewindRequest(agent_id=one.id, message_id=f"{echoed}-user"))
    await py.until(kind_is("timeline_reset", one.id))
    await turn(one.id, "after the rewind")
    await stubs.agents.ReloadAgent(
        agent_pb.ReloadAgentRequest(agent_id=two.id, rehydrate_from_disk=True)
    )
    await py.until(kind_is("timeline_reset", two.id))
    await turn(two.id, "/reply after the reload")


def check_coverage(events: list[Event]) -> None:
    """The scenario produced what it claims to (so the comparison is not a vacuous one)."""
    kinds = [str(e.WhichOneof("payload")) for e in events]
    for kind, count in [
        ("timeline_reset", 2), ("permission_requested", 1), ("permission_resolved", 1),
        ("turn_failed", 1), ("turn_completed", 5), ("timeline_row_updated", 1),
    ]:  # fmt: skip
        assert kinds.count(kind) >= count, (kind, kinds)
    rows = [e.timeline_row_appended for e in events if e.HasField("timeline_row_appended")]
    assert len({(r.agent_id, r.epoch) for r in rows}) == 4  # two agents, two epochs each
    assert any(r.row.item.HasField("tool_call") for r in rows)
    assert any(HOSTILE in r.row.item.assistant_message.text for r in rows)


# --- tests ----------------------------------------------------------------------------------


async def test_node_subscribers_receive_exactly_the_events_the_python_client_receives(
    node: str, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    # Something for the snapshot to carry: an agent with a turn behind it.
    ready = (await stubs.agents.CreateAgent(create_request(str(tmp_path), title="ready"))).agent
    await stubs.turns.SendPrompt(prompt_request(ready.id, "before anyone watches"))
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=ready.id))

    py = PySubscriber(stubs, event_pb.SubscribeRequest())
    nodes = [await NodeSubscriber.start(node, *spec) for spec in subscribers(daemon)]
    try:
        await py.until(synced)
        for sub in nodes:
            await sub.until(synced)
        await scenario(stubs, py, tmp_path)
        last = py.seen[-1].revision
        for sub in nodes:
            await sub.until(lambda e: e.revision >= last)
            await sub.stop()
    finally:
        py.close()
        for sub in nodes:
            await sub.kill()

    check_coverage(py.seen)
    assert py.seen[0].agent_upserted.agent.id == ready.id  # the snapshot came first
    for sub in nodes:
        got = [e for e in sub.seen if e.revision <= last]
        assert got == py.seen, sub.name


async def test_node_subscribers_resumed_from_a_revision_replay_exactly_what_python_saw(
    node: str, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    py = PySubscriber(stubs, event_pb.SubscribeRequest())
    try:
        mark = await py.until(synced)
        await scenario(stubs, py, tmp_path)
    finally:
        py.close()
    live = py.seen[py.seen.index(mark) + 1 :]
    resume = [
        "--resume-revision", str(mark.synced.revision),
        "--resume-incarnation", mark.synced.incarnation, "--max-events", str(len(live)),
    ]  # fmt: skip
    nodes = [await NodeSubscriber.start(node, *spec, *resume) for spec in subscribers(daemon)]
    try:
        results = await asyncio.gather(*(sub.run_to_exit() for sub in nodes))
    finally:
        for sub in nodes:
            await sub.kill()
    for sub, (code, err) in zip(nodes, results, strict=True):
        assert (code, err) == (0, ""), sub.name
        assert sub.seen == live, sub.name


async def test_node_subscribers_fetch_the_timeline_page_python_fetches(
    node: str, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    async def start(agent_id: str) -> list[NodeSubscriber]:
        page = ("--fetch-timeline", agent_id, "--max-events", "1")
        return [await NodeSubscriber.start(node, *spec, *page) for spec in subscribers(daemon)]

    await a_page_as_python_fetches_it(stubs, tmp_path, start)


async def test_a_rejected_subscription_fails_with_its_status_and_exit_1(
    node: str, daemon: DaemonThread
) -> None:
    bad = ("--agent", "a", "--agent", "a")
    nodes = [await NodeSubscriber.start(node, *spec, *bad) for spec in subscribers(daemon)]
    try:
        results = await asyncio.gather(*(sub.run_to_exit() for sub in nodes))
    finally:
        for sub in nodes:
            await sub.kill()
    for sub, (code, err) in zip(nodes, results, strict=True):
        assert (code, sub.seen) == (1, []), sub.name
        assert err.startswith("Subscribe failed: InvalidArgument: "), (sub.name, err)


async def test_the_readme_example_type_checks_and_streams_a_turn(
    node: str, daemon: DaemonThread, tmp_path: Path
) -> None:
    # Compiled inside the package, so that its import of "@corral/client" resolves to it.
    out_dir = TS_DIR / "build" / f"test-{os.getpid()}"
    try:
        tsc = await asyncio.create_subprocess_exec(
            node, str(TS_DIR / "node_modules" / "typescript" / "bin" / "tsc"),
            "-p", str(TS_DIR), "--outDir", str(out_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(tsc.communicate(), TIMEOUT)
        assert tsc.returncode == 0, out.decode()
        example = await asyncio.create_subprocess_exec(
            node, str(out_dir / "examples" / "readme.js"), f"http://{daemon.address}",
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(example.communicate(), TIMEOUT)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    assert (example.returncode, err.decode()) == (0, "")
    lines = out.decode().splitlines()
    assert lines[0] == "turnStarted " and lines[-1] == "turnCompleted ", lines
    assert {"row userMessage", "row assistantMessage"} <= set(lines), lines
