"""The ACP file methods through corral's wire, asked by a real ACP agent process (built on the
official SDK, acp_sdk_agent.py's `files` mode) of a daemon: nothing outside the agent's cwd is
ever read or written, whatever the agent races (a directory swapped for a symlink to outside
while it reads and writes), symlinks, `..`, /proc and absolute paths outside are refused, a
FIFO is refused at once (and 40 reads of one starve nobody), a huge file is refused with the
size limit's error."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.sandbox import MAX_FILE_BYTES
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread

AGENT = Path(__file__).parents[1] / "unit" / "providers" / "acp_sdk_agent.py"
SECRET = "the secret outside the cwd"
RENAME_EXCHANGE = 2
AT_FDCWD = -100


@pytest.fixture
async def stubs() -> AsyncIterator[Stubs]:
    provider = AcpProvider([sys.executable, str(AGENT), "files"], dict(os.environ), name="fs")
    daemon = DaemonThread(Config(extra_providers={"fs": provider})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    """The agent's cwd, and a directory outside it holding a secret."""
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    cwd.mkdir()
    outside.mkdir()
    (outside / "f").write_text(SECRET)
    return cwd, outside


async def new_agent(stubs: Stubs, cwd: Path) -> str:
    reply = await stubs.agents.CreateAgent(create_request(str(cwd), provider="fs"))
    return str(reply.agent.id)


async def ask(
    stubs: Stubs, agent_id: str, ops: list[dict[str, Any]], parallel: bool = False
) -> list[dict[str, Any]]:
    """Have the agent ask corral for `ops`; their outcomes, as the agent saw them."""
    request = json.dumps({"ops": ops, "parallel": parallel})
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(request))
    )
    said, last = "", ""
    while isinstance(event := await call.read(), turn_pb.StreamTurnResponse):
        last = str(event.WhichOneof("event"))
        if event.HasField("row") and event.row.item.HasField("assistant_message"):
            said += event.row.item.assistant_message.text
    assert last == "turn_completed"
    outcomes: list[dict[str, Any]] = json.loads(said)
    return outcomes


def _touch(path: Path) -> Path:
    path.touch()
    return path


def errors(outcomes: list[dict[str, Any]]) -> list[str]:
    return [str(o["error"]) for o in outcomes if "error" in o]


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): each always exists."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2", str(a))


@pytest.fixture
def swapping(place: tuple[Path, Path]) -> Iterator[list[int]]:
    """cwd/d flips between a directory (holding f = "inside") and a symlink to outside, as
    fast as a thread can, until the test ends; yields the count of flips."""
    cwd, outside = place
    (cwd / "d").mkdir()
    (cwd / "d" / "f").write_text("inside")
    (cwd / "alt").symlink_to(outside)
    flips, stop = [0], threading.Event()

    def flip() -> None:
        while not stop.is_set():
            exchange(cwd / "d", cwd / "alt")
            flips[0] += 1

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    try:
        yield flips
    finally:
        stop.set()
        thread.join(10)


async def test_swapping_a_directory_for_a_symlink_never_reaches_outside(
    stubs: Stubs, place: tuple[Path, Path], swapping: list[int]
) -> None:
    cwd, outside = place
    agent_id = await new_agent(stubs, cwd)
    reads = [{"read": str(cwd / "d" / "f")} for _ in range(300)]
    writes = [{"write": str(cwd / "d" / f"w{i}"), "content": "x"} for i in range(150)]
    outcomes = await ask(stubs, agent_id, reads + writes)
    read_back = [o.get("content") for o in outcomes[:300]]
    assert SECRET not in read_back
    assert sorted(os.listdir(outside)) == ["f"]  # no write landed outside
    assert (outside / "f").read_text() == SECRET
    # The race ran: the directory flipped during the reads, some reads got through.
    assert swapping[0] > 0 and "inside" in read_back
    print(f"swap race: {swapping[0]} flips, {read_back.count('inside')} of 300 reads inside")


async def test_symlinks_are_refused_even_pointing_inside(
    stubs: Stubs, place: tuple[Path, Path]
) -> None:
    cwd, outside = place
    (cwd / "real").mkdir()
    (cwd / "real" / "f").write_text("inside")
    (cwd / "out").symlink_to(outside)
    (cwd / "in").symlink_to(cwd / "real")
    (cwd / "leaf").symlink_to(outside / "f")
    agent_id = await new_agent(stubs, cwd)
    outcomes = await ask(
        stubs,
        agent_id,
        [
            {"read": str(cwd / "out" / "f")},
            {"read": str(cwd / "in" / "f")},
            {"read": str(cwd / "leaf")},
            {"write": str(cwd / "out" / "new"), "content": "x"},
            {"write": str(cwd / "leaf"), "content": "x"},
            {"read": str(cwd / "real" / "f")},
        ],
    )
    assert [("symlink" in e) for e in errors(outcomes)] == [True] * 5
    assert outcomes[-1] == {"content": "inside"}
    assert sorted(os.listdir(outside)) == ["f"] and (outside / "f").read_text() == SECRET
    assert (cwd / "leaf").is_symlink()  # the write refused, not replacing the link either


async def test_paths_outside_the_cwd_are_refused(stubs: Stubs, place: tuple[Path, Path]) -> None:
    cwd, outside = place
    (cwd / "sub").mkdir()
    agent_id = await new_agent(stubs, cwd)
    bad = [
        "/proc/self/environ",
        "/proc/1/root/etc/passwd",
        str(cwd / ".." / "outside" / "f"),
        str(cwd / "sub" / ".." / ".." / "outside" / "f"),
        str(outside / "f"),
        "relative/path",
        str(cwd),
    ]
    outcomes = await ask(
        stubs,
        agent_id,
        [{"read": p} for p in bad] + [{"write": p, "content": "x"} for p in bad],
    )
    assert len(errors(outcomes)) == 2 * len(bad)
    assert all(o.get("code") == -32602 for o in outcomes)  # invalid params: the agent's fault
    assert sorted(os.listdir(outside)) == ["f"] and (outside / "f").read_text() == SECRET


async def test_a_fifo_is_refused_at_once_and_starves_no_other_agent(
    stubs: Stubs, place: tuple[Path, Path], tmp_path: Path
) -> None:
    cwd, _ = place
    os.mkfifo(cwd / "fifo")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes").write_text("hello")
    reader, neighbour = await new_agent(stubs, cwd), await new_agent(stubs, other)
    async with asyncio.timeout(10):  # the old code blocked a thread per read, forever
        fifo_reads = asyncio.create_task(
            ask(stubs, reader, [{"read": str(cwd / "fifo")}] * 40, parallel=True)
        )
        assert await ask(stubs, neighbour, [{"read": str(other / "notes")}]) == [
            {"content": "hello"}
        ]
        outcomes = await fifo_reads
        written = await ask(stubs, reader, [{"write": str(cwd / "fifo"), "content": "x"}])
    assert len(outcomes) == 40 and all("FIFO" in e for e in errors(outcomes))
    assert "FIFO" in errors(written)[0]


async def test_a_huge_file_is_refused_with_the_size_limit(
    stubs: Stubs, place: tuple[Path, Path]
) -> None:
    cwd, _ = place
    os.truncate(_touch(cwd / "huge"), 200 * 1024 * 1024)  # sparse: no disk, nothing to read
    (cwd / "lines").write_text("one\ntwo\nthree\nfour\n")
    agent_id = await new_agent(stubs, cwd)
    outcomes = await ask(
        stubs,
        agent_id,
        [
            {"read": str(cwd / "huge")},
            {"read": str(cwd / "huge"), "line": 1, "limit": 1},
            {"read": str(cwd / "lines"), "line": 2, "limit": 2},
            {"read": str(cwd / "missing")},
        ],
    )
    [whole, first_line] = errors(outcomes)
    assert f"{MAX_FILE_BYTES}-byte limit" in whole and str(200 * 1024 * 1024) in whole
    assert "limit" in first_line
    assert outcomes[2:] == [{"content": "two\nthree\n"}, {"content": ""}]
