"""A daemon SIGKILLed with an agent running leaves the agent's processes behind (nobody closed
them); the next daemon on the same state directory kills them at start-up, before it serves.
The agent is claude_code_stub.py's `hang` (it ignores SIGTERM and the end of its stdin, and
starts a sleeper in a session of its own, as Claude Code's Bash commands do), run by
`corral serve --config` as a real process. Every agent process carries
CORRAL_AGENT_PROCESS=<the daemon's tag>-<its own>, the daemon's tag a hash of the directory."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral_server.providers import reaping
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.resume_support import create_agent
from tests.support.client import Stubs
from tests.support.daemon import DaemonProcess

STUB = Path(__file__).parents[1] / "unit" / "providers" / "claude_code_stub.py"


@pytest.fixture
def tag() -> Iterator[str]:
    """The test's own tag in the agents' environment, so nothing outlives the test."""
    tag = uuid.uuid4().hex
    try:
        yield tag
    finally:
        sweep(programs.LEFTOVER_TAG, tag)


def serve(state: Path, config: Path) -> DaemonProcess:
    return DaemonProcess(state, "--config", str(config), "--drain-delay-s", "0").start()


async def until_pids(tag: str, count: int) -> list[int]:
    """The daemon's agent processes, once there are `count` (polled for 10 s at most: a
    process leaves /proc when the kernel is done with it, which nothing signals)."""
    for _ in range(500):
        if len(pids := reaping.tagged_pids(tag, prefix=True)) == count:
            return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"agent processes of {tag}: {pids}, not {count}")


async def test_a_restarted_daemon_kills_the_agent_processes_a_sigkilled_one_left(
    tmp_path: Path, tag: str
) -> None:
    state, cwd = tmp_path / "state", tmp_path / "work"
    cwd.mkdir()
    config = tmp_path / "providers.toml"
    config.write_text(
        "[providers.stub]\n"
        'kind = "claude-code"\n'
        f'command = ["{sys.executable}", "{STUB}", "hang"]\n'
        f'env = {{ {programs.LEFTOVER_TAG} = "{tag}" }}\n'
    )
    daemon_tag = reaping.daemon_tag(state)
    first = serve(state, config)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            await create_agent(Stubs.of(channel), cwd, "stub")
        left = await until_pids(daemon_tag, 2)  # the stub and its sleeper
        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.stop()
    assert sorted(reaping.tagged_pids(daemon_tag, prefix=True)) == sorted(left)  # left behind

    second = serve(state, config)
    try:
        assert await until_pids(daemon_tag, 0) == []
    finally:
        second.stop()
