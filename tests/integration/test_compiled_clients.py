"""The compiled clients against the real daemon: C++ (clients/cpp: protoc's C++ generator and
grpc's plugin, compiled with Debian's g++, libgrpc++ and libprotobuf), Go (clients/go: stubs
generated from proto/ by protoc-gen-go and protoc-gen-go-grpc, built with Debian's Go packages)
and Java (clients/java: protoc's Java generator and grpc-java's plugin, compiled with Debian's
OpenJDK and jars), each built by its clients/<language>/run. Each language's subscriber receives
exactly the events the generated Python client receives, over the TypeScript client's scenario
(two agents' interleaved turns, a tool call with hostile input and a 2^53 + 1 number, a
permission, a failed turn, a rewind and a reload, each a new epoch); a subscriber resumed from a
revision replays exactly what Python saw; and one more scenario (labels, NUL, U+2028 and
</script>, -0.0, 12345678901234567890 and 1e21 in a tool's input, a permission answered with
edited input, a canceled turn, a sub-agent, an archive) ends in a drain, every stream with the
same stream_ending, byte for byte; that one is watched by the TypeScript subscribers too (gRPC,
and Connect in binary and JSON). After a restart on a state directory, a resume replays, and a
resume naming another incarnation resets, for each as for Python. Each prints every Event as
base64 of its binary encoding; the test decodes them and compares (protobuf equality).

Needs each language's toolchain (`clients/<language>/run --setup` installs it with apt;
buildscripts/test does); without it these tests fail (they never skip).
"""

from __future__ import annotations

import asyncio
import math
import shutil
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests import conftest
from tests.integration.test_typescript_client import (
    TS_DIR,
    NodeSubscriber,
    PySubscriber,
    a_page_as_python_fetches_it,
    check_coverage,
    scenario,
    synced,
)
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread

CLIENTS = Path(__file__).resolve().parents[2] / "clients"
# What each language's build needs on PATH.
TOOLS = {
    "cpp": ("g++", "pkg-config", "protoc", "grpc_cpp_plugin"),
    "go": ("go", "protoc", "protoc-gen-go", "protoc-gen-go-grpc"),
    "java": ("javac", "protoc"),
}
BUILD_TIMEOUT = 600.0  # a cold build cache on a loaded machine
# buildscripts/test builds every client before pytest; run alone, a test builds its client first.
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 120)


@pytest.fixture(scope="module", params=sorted(TOOLS))
def client(request: pytest.FixtureRequest) -> Path:
    """clients/<language>/run, built."""
    language: str = request.param
    missing = [tool for tool in TOOLS[language] if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{missing} missing: run clients/{language}/run --setup (apt)")
    run = CLIENTS / language / "run"
    done = subprocess.run(
        [str(run), "--build"], capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    return run


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonThread]:
    thread = DaemonThread(conftest.test_config()).start()
    yield thread
    thread.stop()


@pytest.fixture
async def stubs(daemon: DaemonThread) -> Any:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        yield Stubs.of(channel)


async def compiled_subscriber(run: Path, address: str, *args: str) -> NodeSubscriber:
    """A compiled subscriber behind the same line protocol as the Node one."""
    proc = await asyncio.create_subprocess_exec(
        str(run), address, "--until-stdin-ends", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return NodeSubscriber(proc, f"{run.parent.name} {' '.join(args)}")


async def test_a_compiled_subscriber_receives_exactly_the_events_the_python_client_receives(
    client: Path, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    ready = (await stubs.agents.CreateAgent(create_request(str(tmp_path), title="ready"))).agent
    await stubs.turns.SendPrompt(prompt_request(ready.id, "before anyone watches"))
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=ready.id))

    py = PySubscriber(stubs, event_pb.SubscribeRequest())
    sub = await compiled_subscriber(client, daemon.address)
    try:
        await py.until(synced)
        await sub.until(synced)
        await scenario(stubs, py, tmp_path)
        last = py.seen[-1].revision
        await sub.until(lambda e: e.revision >= last)
        await sub.stop()
    finally:
        py.close()
        await sub.kill()

    check_coverage(py.seen)
    snapshot = py.seen[: next(i for i, e in enumerate(py.seen) if e.HasField("synced"))]
    assert ready.id in {e.agent_upserted.agent.id for e in snapshot}  # the snapshot came first
    got = [e for e in sub.seen if e.revision <= last]
    assert got == py.seen
    # A deliberate mismatch fails the comparison: one character of one row's text.
    index = next(
        i for i, e in enumerate(got) if e.timeline_row_appended.row.item.HasField("tool_call")
    )
    altered = [event_pb.Event.FromString(e.SerializeToString()) for e in got]
    altered[index].timeline_row_appended.row.item.tool_call.name += "!"
    assert altered != py.seen


async def test_a_resumed_compiled_subscriber_replays_exactly_what_python_saw(
    client: Path, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    py = PySubscriber(stubs, event_pb.SubscribeRequest())
    try:
        mark = await py.until(synced)
        await scenario(stubs, py, tmp_path)
    finally:
        py.close()
    live = py.seen[py.seen.index(mark) + 1 :]
    sub = await compiled_subscriber(
        client, daemon.address,
        "--resume-revision", str(mark.synced.revision),
        "--resume-incarnation", mark.synced.incarnation, "--max-events", str(len(live)),
    )  # fmt: skip
    try:
        code, err = await sub.run_to_exit()
    finally:
        await sub.kill()
    assert (code, err) == (0, "")
    assert sub.seen == live


async def test_a_compiled_subscriber_fetches_the_timeline_page_python_fetches(
    client: Path, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    async def start(agent_id: str) -> list[NodeSubscriber]:
        page = ("--fetch-timeline", agent_id, "--max-events", "1")
        return [await compiled_subscriber(client, daemon.address, *page)]

    await a_page_as_python_fetches_it(stubs, tmp_path, start)


# Text and numbers no library may mangle: NUL, U+2028 (a line break to JavaScript), markup that
# ends a script element, and JSON numbers at the edges of a double.
AWKWARD = "nul:\x00 ls:\u2028 ps:\u2029 </script><!-- naïve 🦀"
NUMBERS = '{"neg_zero": -0.0, "big": 12345678901234567890, "exp": 1e21, "tiny": 5e-324}'


def turn_completed(turn_id: str) -> Callable[[event_pb.Event], bool]:
    """A test for the turn_completed event of `turn_id`."""
    return lambda event: event.turn_completed.turn_id == turn_id


def payload(event: event_pb.Event) -> str:
    return str(event.WhichOneof("payload"))


async def rest_of_the_scenario(stubs: Stubs, py: PySubscriber, cwd: Path) -> str:
    """Labels, awkward text and numbers, a permission answered with edited input, a canceled
    turn, a sub-agent whose result wakes its parent, then an archive. The parent's id."""
    labels = {"team": "blue", "note": AWKWARD.replace("\x00", "")}
    parent = (await stubs.agents.CreateAgent(create_request(str(cwd), labels=labels))).agent

    async def until_turn_ends(turn_id: str) -> None:
        await py.until(lambda e: payload(e).startswith("turn_") and payload(e) != "turn_started"
                       and getattr(e, payload(e)).turn_id == turn_id)  # fmt: skip

    async def send(*lines: str) -> str:
        return str((await stubs.turns.SendPrompt(prompt_request(parent.id, *lines))).turn_id)

    await until_turn_ends(await send(f"/tool calc {NUMBERS}", f"/reply {AWKWARD}", AWKWARD))
    asking = await send("/permission write", "/reply written")
    asked = await py.until(lambda e: e.HasField("permission_requested"))
    edited = struct_pb2.Struct()
    edited.update({"path": AWKWARD, "n": -0.0})
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=parent.id,
            request_id=asked.permission_requested.permission.id,
            behavior=turn_pb.PERMISSION_BEHAVIOR_ALLOW,
            selected_action_id="allow",
            updated_input=edited,
        )
    )
    await until_turn_ends(asking)
    sleeping = await send("/sleep 600000")
    await py.until(lambda e: e.turn_started.turn_id == sleeping)
    await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=parent.id))
    await until_turn_ends(sleeping)
    await until_turn_ends(await send("/spawn a small task"))
    await py.until(
        lambda e: e.subagent_run_updated.run.announce_state == sub_pb.ANNOUNCE_STATE_DELIVERED
    )
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=parent.id))
    await stubs.agents.ArchiveAgent(agent_pb.ArchiveAgentRequest(agent_id=parent.id))
    return str(parent.id)


def deterministic(events: list[event_pb.Event]) -> list[bytes]:
    """Each event's bytes in one canonical form (map entries sorted): a double's sign and bits
    count, which message equality (-0.0 == 0.0) would not see."""
    return [e.SerializeToString(deterministic=True) for e in events]


Start = Callable[[DaemonThread], Awaitable[list[NodeSubscriber]]]


async def through_the_drain(tmp_path: Path, start: Start) -> list[NodeSubscriber]:
    """The rest of the scenario on a daemon of its own (with its web port), watched by Python
    and by the subscribers `start` makes, then a drain; each ends by itself and must equal
    Python, byte for byte."""
    daemon = DaemonThread(replace(conftest.test_config(), web_listen="127.0.0.1:0")).start()
    subs: list[NodeSubscriber] = []
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            py = PySubscriber(stubs, event_pb.SubscribeRequest())
            subs = await start(daemon)
            await py.until(synced)
            for sub in subs:
                await sub.until(synced)
            parent = await rest_of_the_scenario(stubs, py, tmp_path)
            assert daemon.daemon is not None
            drain = asyncio.run_coroutine_threadsafe(
                daemon.daemon.drain(grace_s=3.0, delay_s=0), daemon.loop
            )
            await py.until(lambda e: e.HasField("stream_ending"))
            # The server ends their streams too.
            ends = await asyncio.gather(*(sub.run_to_exit() for sub in subs))
            await asyncio.wrap_future(drain)
            py.close()
    finally:
        for sub in subs:
            await sub.kill()
        daemon.stop()
    kinds = [payload(e) for e in py.seen]
    for kind in ("turn_canceled", "permission_resolved", "subagent_run_updated", "stream_ending"):
        assert kind in kinds, kind
    archived = [e.agent_upserted.agent for e in py.seen if e.agent_upserted.agent.id == parent]
    assert archived[-1].HasField("archived_at") and archived[-1].labels["team"] == "blue"
    calls = [e.timeline_row_appended.row.item.tool_call for e in py.seen]
    neg_zero = next(c.input.struct_value["neg_zero"] for c in calls if c.name == "calc")
    assert isinstance(neg_zero, float)
    assert math.copysign(1.0, neg_zero) == -1.0  # the sign survived the server
    for sub, end in zip(subs, ends, strict=True):
        assert end == (0, ""), sub.name
        assert sub.seen == py.seen, sub.name
        assert deterministic(sub.seen) == deterministic(py.seen), sub.name
    return subs


async def test_a_compiled_subscriber_sees_the_rest_of_the_scenario_through_the_drain_as_python_does(
    client: Path, tmp_path: Path
) -> None:
    async def start(daemon: DaemonThread) -> list[NodeSubscriber]:
        return [await compiled_subscriber(client, daemon.address)]

    await through_the_drain(tmp_path, start)


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None or not (TS_DIR / "node_modules" / "@connectrpc" / "connect-node").is_dir():
        pytest.fail(f"node and connect-node are needed: npm ci --prefix {TS_DIR}")
    return path


async def test_typescript_subscribers_see_it_through_the_drain_over_grpc_and_connect(
    node: str, tmp_path: Path
) -> None:
    async def start(daemon: DaemonThread) -> list[NodeSubscriber]:
        assert daemon.daemon is not None
        web = f"http://127.0.0.1:{daemon.daemon.web_port}"
        specs = [
            (f"http://{daemon.address}", "--transport", "grpc"),
            (web, "--transport", "connect"),
            (web, "--transport", "connect", "--json"),
        ]
        return [await NodeSubscriber.start(node, *spec) for spec in specs]

    assert len(await through_the_drain(tmp_path, start)) == 3


async def test_after_a_restart_a_resume_replays_and_a_wrong_incarnation_resets_as_for_python(
    client: Path, tmp_path: Path
) -> None:
    """With a state directory: events before a restart, then every subscriber resumes from the
    same revision on the restarted daemon (the durable log: the same incarnation) and gets
    Python's replay; one naming another incarnation gets Python's reset and new snapshot."""
    config = replace(conftest.test_config(), state_dir=tmp_path / "state")
    first = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            py = PySubscriber(stubs, event_pb.SubscribeRequest())
            mark = (await py.until(synced)).synced
            agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
            for text in ("one", f"/reply {AWKWARD}"):
                turn_id = (await stubs.turns.SendPrompt(prompt_request(agent.id, text))).turn_id
                await py.until(turn_completed(turn_id))
            py.close()
    finally:
        first.stop()
    again = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(again.address) as channel:
            for incarnation in (mark.incarnation, "another-log"):
                request = event_pb.SubscribeRequest(
                    resume_revision=mark.revision, resume_incarnation=incarnation
                )
                py = PySubscriber(Stubs.of(channel), request)
                await py.until(synced)
                py.close()
                sub = await compiled_subscriber(
                    client, again.address, "--resume-revision", str(mark.revision),
                    "--resume-incarnation", incarnation, "--max-events", str(len(py.seen)),
                )  # fmt: skip
                try:
                    assert await sub.run_to_exit() == (0, "")
                finally:
                    await sub.kill()
                assert sub.seen == py.seen, incarnation
                reset = py.seen[0].HasField("subscription_reset")
                assert reset == (incarnation != mark.incarnation), payload(py.seen[0])
                # A replay holds the turns; a reset, the agent in its new snapshot.
                completed = [e for e in py.seen if e.HasField("turn_completed")]
                assert len(completed) == (0 if reset else 2)
                assert any(e.agent_upserted.agent.id == agent.id for e in py.seen)
    finally:
        again.stop()
