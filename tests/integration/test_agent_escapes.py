"""No process escapes an agent, whatever it does to its environment or session: an ACP agent
(acp_stub.py's `shell` mode, a real process) starts `setsid env -i sleep` in the
background (a new session, no environment: the reaping tag is gone) and the shell that started
it exits, so the sleeper is an orphan. CloseAgent kills it (and only its own agent's); a
`corral serve` SIGKILLed with it running leaves it, and the restart kills it; an orphan whose
agent process died comes back to `corral serve` (a subreaper), which kills and reaps it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers import process_tree, reaping
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.reaping import TAG_ENV
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonProcess, DaemonThread

AGENT = Path(__file__).parents[1] / "unit" / "providers" / "acp_stub.py"
ESCAPE = "(setsid env -i sleep 1000 >/dev/null 2>&1 & echo $!)"
Key = tuple[int, int]


@pytest.fixture
def escaped() -> Iterator[list[Key]]:
    """The sleepers the test started; whatever happens, none outlives it."""
    keys: list[Key] = []
    try:
        yield keys
    finally:
        for pid, start in keys:
            if process_tree.start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def escape(stubs: Stubs, agent_id: str, escaped: list[Key], prompt: str = ESCAPE) -> Key:
    """Have the agent start a sleeper that escapes its session and environment."""
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    )
    said = ""
    while isinstance(event := await call.read(), turn_pb.StreamTurnResponse):
        if event.HasField("row") and event.row.item.HasField("assistant_message"):
            said += event.row.item.assistant_message.text
    pid = int(said)
    start = process_tree.start_time(pid)
    assert start is not None
    escaped.append((pid, start))
    await sleeping(pid)
    assert TAG_ENV.encode() not in proc_file(pid, "environ")  # no tag left
    assert os.getsid(pid) == pid  # a session of its own
    return pid, start


def proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


async def sleeping(pid: int) -> None:
    """Until `pid` runs sleep (setsid and env have exec'd it): 10 s at most."""
    for _ in range(500):
        if proc_file(pid, "cmdline").startswith(b"sleep\0"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{pid} never ran sleep")


async def gone(key: Key) -> bool:
    """Whether the process ends (and is reaped) within 10 s; a process leaves /proc when the
    kernel is done with it, which nothing signals."""
    for _ in range(500):
        if process_tree.start_time(key[0]) != key[1]:
            return True
        await asyncio.sleep(0.02)
    return False


def alive(key: Key) -> bool:
    proc = process_tree.read(key[0])
    return proc is not None and proc.start == key[1] and not proc.zombie


@pytest.fixture
async def stubs() -> AsyncIterator[Stubs]:
    provider = AcpProvider([sys.executable, str(AGENT), "shell"], dict(os.environ), name="sh")
    daemon = DaemonThread(Config(extra_providers={"sh": provider})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


async def close(stubs: Stubs, agent_id: str) -> None:
    await stubs.agents.CloseAgent(agent_svc_pb.CloseAgentRequest(agent_id=agent_id))


async def test_close_agent_kills_what_escaped_it_and_nothing_of_another_agent(
    stubs: Stubs, tmp_path: Path, escaped: list[Key]
) -> None:
    first = (await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="sh"))).agent
    second = (await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="sh"))).agent
    mine = await escape(stubs, first.id, escaped)
    theirs = await escape(stubs, second.id, escaped)
    await close(stubs, first.id)
    assert await gone(mine)
    assert alive(theirs)  # another agent's close never touches it
    await close(stubs, second.id)
    assert await gone(theirs)


def serve(state: Path, config: Path) -> DaemonProcess:
    return DaemonProcess(state, "--config", str(config), "--drain-delay-s", "0").start()


def stop(daemon: DaemonProcess) -> None:
    """SIGKILL the daemon, and kill what its agents left (a failed test leaves no process)."""
    daemon.stop()
    reaping.reap_leftovers(reaping.daemon_tag(daemon.state_dir), daemon.state_dir)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Two providers: `sh` (an agent that outlives its stdin) and `sh-exit` (one that exits
    when its stdin closes, as most do)."""
    path = tmp_path / "providers.toml"
    path.write_text(
        "".join(
            f'[providers.{mode}]\nkind = "acp"\ncommand = ["{sys.executable}", "{AGENT}", '
            f'"{"shell" if mode == "sh" else "shell-exit"}"]\n'
            for mode in ("sh", "sh-exit")
        )
    )
    return path


async def test_a_restart_kills_what_escaped_the_agents_of_a_sigkilled_daemon(
    tmp_path: Path, config: Path, escaped: list[Key]
) -> None:
    first = serve(tmp_path / "state", config)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent = await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="sh"))
            sleeper = await escape(stubs, agent.agent.id, escaped)
        first.stop()  # SIGKILL: nothing closed its agent
        assert alive(sleeper)  # left behind, with no tag to find it by

        second = serve(tmp_path / "state", config)
        try:
            assert await gone(sleeper)
        finally:
            stop(second)
    finally:
        stop(first)


async def test_a_restart_kills_what_outlived_an_agent_process_that_exited_with_the_daemon(
    tmp_path: Path, config: Path, escaped: list[Key]
) -> None:
    """The agent process exits when the SIGKILLed daemon's pipe closes: its orphan goes to
    init, out of any tree; the ledger recorded it while the agent ran."""
    state = tmp_path / "state"
    first = serve(state, config)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            request = create_request(str(tmp_path), provider="sh-exit")
            agent = await stubs.agents.CreateAgent(request)
            sleeper = await escape(stubs, agent.agent.id, escaped)
        await recorded(state, sleeper)
        leader = process_tree.read(sleeper[0])
        assert leader is not None
        first.stop()  # SIGKILL: the agent process reads the end of its stdin and exits
        assert await out_of_tree(sleeper, leader.ppid)

        second = serve(state, config)
        try:
            assert await gone(sleeper)
        finally:
            stop(second)
    finally:
        stop(first)


async def recorded(state: Path, key: Key) -> None:
    """Until the daemon's ledger records `key` (it looks about once a second)."""
    for _ in range(500):
        if key in reaping.recorded(state / reaping.LEDGER):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{key} never recorded")


async def out_of_tree(key: Key, leader: int) -> bool:
    """Until `key` is alive and reparented away from `leader` (its agent process exited)."""
    for _ in range(500):
        proc = process_tree.read(key[0])
        if proc is not None and proc.ppid != leader:
            return alive(key)
        await asyncio.sleep(0.02)
    return False


async def test_an_orphan_of_a_dead_agent_process_is_killed_and_reaped_by_corral_serve(
    tmp_path: Path, config: Path, escaped: list[Key]
) -> None:
    daemon = serve(tmp_path / "state", config)
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            request = create_request(str(tmp_path), provider="sh")
            dies, lives = [(await stubs.agents.CreateAgent(request)).agent for _ in range(2)]
            theirs = await escape(stubs, lives.id, escaped)
            # The agent process is killed by its own command: the sleeper outlives it and
            # comes back to the daemon (a subreaper) rather than to init; the daemon closes
            # the dead session, and kills and reaps the orphan with it.
            prompt = f"{ESCAPE} > {tmp_path / 'pid'}; kill -9 $PPID"
            call = stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=dies.id, content=text(prompt))
            )
            while isinstance(event := await call.read(), turn_pb.StreamTurnResponse):
                last = event.WhichOneof("event")
            assert last == "turn_failed"
            pid = int((tmp_path / "pid").read_text())
            orphan = (pid, process_tree.start_time(pid) or 0)
            escaped.append(orphan)
            assert await gone(orphan)  # killed, and reaped: no zombie either
            assert alive(theirs)  # the living agent's own is untouched
            await close(stubs, lives.id)
            assert await gone(theirs)
    finally:
        stop(daemon)
