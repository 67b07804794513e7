"""The Go client (clients/go: stubs generated from proto/ by protoc-gen-go and
protoc-gen-go-grpc, built with Debian's Go packages by clients/go/run) against the real daemon:
a Go subscriber receives exactly the events the generated Python client receives, over the
TypeScript client's scenario (two agents' interleaved turns, a tool call with hostile input and
a 2^53 + 1 number, a permission, a failed turn, a rewind and a reload, each a new epoch), and a
Go subscriber resumed from a revision replays exactly what Python saw. Go prints each Event as
base64 of its binary encoding; the test decodes them and compares (protobuf equality).

Needs the Go toolchain (`clients/go/run --setup` installs it with apt; buildscripts/test does);
without it these tests fail (they never skip).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests import conftest
from tests.integration.test_typescript_client import (
    NodeSubscriber,
    PySubscriber,
    check_coverage,
    scenario,
    synced,
)
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread

RUN = Path(__file__).resolve().parents[2] / "clients" / "go" / "run"
BUILD_TIMEOUT = 600.0  # a cold Go build cache on a loaded machine


@pytest.fixture(scope="module")
def go_client() -> Path:
    if shutil.which("go") is None or shutil.which("protoc-gen-go") is None:
        pytest.fail("the Go toolchain is missing: run clients/go/run --setup (apt)")
    done = subprocess.run(
        [str(RUN), "--build"], capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    return RUN


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonThread]:
    thread = DaemonThread(conftest.test_config()).start()
    yield thread
    thread.stop()


@pytest.fixture
async def stubs(daemon: DaemonThread) -> Any:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        yield Stubs.of(channel)


async def go_subscriber(run: Path, address: str, *args: str) -> NodeSubscriber:
    """The Go subscriber behind the same line protocol as the Node one."""
    proc = await asyncio.create_subprocess_exec(
        str(run), address, "--until-stdin-ends", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return NodeSubscriber(proc, "go " + " ".join(args))


async def test_a_go_subscriber_receives_exactly_the_events_the_python_client_receives(
    go_client: Path, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    ready = (await stubs.agents.CreateAgent(create_request(str(tmp_path), title="ready"))).agent
    await stubs.turns.SendPrompt(prompt_request(ready.id, "before anyone watches"))
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=ready.id))

    py = PySubscriber(stubs, event_pb.SubscribeRequest())
    go = await go_subscriber(go_client, daemon.address)
    try:
        await py.until(synced)
        await go.until(synced)
        await scenario(stubs, py, tmp_path)
        last = py.seen[-1].revision
        await go.until(lambda e: e.revision >= last)
        await go.stop()
    finally:
        py.close()
        await go.kill()

    check_coverage(py.seen)
    assert py.seen[0].agent_upserted.agent.id == ready.id  # the snapshot came first
    got = [e for e in go.seen if e.revision <= last]
    assert got == py.seen
    # A deliberate mismatch fails the comparison: one character of one row's text.
    index = next(
        i for i, e in enumerate(got) if e.timeline_row_appended.row.item.HasField("tool_call")
    )
    altered = [event_pb.Event.FromString(e.SerializeToString()) for e in got]
    altered[index].timeline_row_appended.row.item.tool_call.name += "!"
    assert altered != py.seen


async def test_a_resumed_go_subscriber_replays_exactly_what_python_saw(
    go_client: Path, daemon: DaemonThread, stubs: Stubs, tmp_path: Path
) -> None:
    py = PySubscriber(stubs, event_pb.SubscribeRequest())
    try:
        mark = await py.until(synced)
        await scenario(stubs, py, tmp_path)
    finally:
        py.close()
    live = py.seen[py.seen.index(mark) + 1 :]
    go = await go_subscriber(
        go_client, daemon.address,
        "--resume-revision", str(mark.synced.revision),
        "--resume-incarnation", mark.synced.incarnation, "--max-events", str(len(live)),
    )  # fmt: skip
    try:
        code, err = await go.run_to_exit()
    finally:
        await go.kill()
    assert (code, err) == (0, "")
    assert go.seen == live
