"""A full disk is left behind without a restart: on a real 8 MiB tmpfs, turns with 300 kB
replies fill it until commits fail; a filler file is deleted, and the next turn succeeds on the
same daemon. Health stays SERVING throughout (reads and streams go on), the metrics say the
store could not write, nothing acknowledged is lost, and `integrity_check` passes after."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli.health import health_stub
from corral_server.app import Config
from corral_server.hub.log_writer import RETRY_MAX_S
from corral_server.store.database import DB_FILE
from tests.integration.test_metrics import scrape
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.small_disk import fill, needs_root, small_tmpfs

pytestmark = needs_root

DISK = "8m"
# Deleted once commits fail: room for the log's checkpoint and one more turn.
FILLER_BYTES = 3 << 20
REPLY = "x" * 300_000
MAX_TURNS = 12  # the disk fills within 4-5 turns
STEP_MS = 100
BEFORE = tl_pb.TIMELINE_DIRECTION_BEFORE


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", DISK) as mount:
        yield mount


async def turn(daemon: DaemonThread, stubs: Stubs, agent_id: str, n: int) -> str:
    """Turn `n` ("/reply n:xxx..."): its error code, "" when it completed, or the status of
    a prompt that was refused. The daemon's clock moves meanwhile (the event log's back-off
    between retries is on it)."""
    try:
        await stubs.turns.SendPrompt(
            prompt_request(agent_id, f"/reply {n}:{REPLY}", client_message_id=f"m{n}")
        )
    except grpc.RpcError as error:
        return error.code().name
    waiting = asyncio.ensure_future(
        stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id), timeout=30)
    )
    while not waiting.done():
        await daemon.advance_async(STEP_MS)
        await asyncio.sleep(0.005)  # real time for the daemon's threads between clock steps
    waited = await waiting
    return "" if waited.status == turn_pb.WAIT_STATUS_IDLE else waited.agent.last_error.code


async def settle(daemon: DaemonThread) -> None:
    """Let the event log's retries run (their back-off is at most RETRY_MAX_S)."""
    for _ in range(round(RETRY_MAX_S * 1000 / STEP_MS) + 1):
        await daemon.advance_async(STEP_MS)
        await asyncio.sleep(0.005)


async def health(channel: grpc.aio.Channel) -> int:
    stub = health_stub(channel)
    response = await stub.Check(health_pb2.HealthCheckRequest(service=""))
    return response.status


async def replies(stubs: Stubs, agent_id: str) -> tuple[set[str], set[str]]:
    """The client message ids of the stored prompts, and the turns whose reply is stored
    (the whole timeline, a page of whole rows at a time)."""
    rows: list[timeline_pb.TimelineRow] = []
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    while True:
        page = await stubs.timeline.FetchTimeline(request)
        rows += page.rows
        if not page.has_older:
            break
        request = tl_pb.FetchTimelineRequest(
            agent_id=agent_id, direction=BEFORE, cursor=page.start_cursor, limit=0
        )
    prompts = {r.item.user_message.client_message_id for r in rows}
    said = {
        r.item.assistant_message.text.split(":", 1)[0]
        for r in rows
        if r.item.HasField("assistant_message")
    }
    return prompts - {""}, said


async def test_the_daemon_writes_again_once_space_is_freed(
    small_disk: Path, tmp_path: Path
) -> None:
    filler = small_disk / "filler"
    fill(filler, FILLER_BYTES)
    state = small_disk / "state"
    config = Config(state_dir=state, metrics_listen="127.0.0.1:0")
    daemon = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(small_disk)))).agent.id
            acknowledged: set[str] = set()  # prompts SendPrompt accepted
            completed: set[str] = set()  # turns that completed
            outcome, n = "", 0
            while outcome == "" and n < MAX_TURNS:
                n += 1
                outcome = await turn(daemon, stubs, agent_id, n)
                if outcome != "UNAVAILABLE":
                    acknowledged.add(f"m{n}")
                if outcome == "":
                    completed.add(str(n))
            assert outcome in ("WRITER_FAILED", "UNAVAILABLE"), "the disk never filled"
            metrics = await asyncio.to_thread(scrape, daemon)
            assert metrics["corral_store_writable"] == 0
            assert metrics["corral_store_write_failures_total"] >= 1
            # Nothing for a balancer to move away from: reads and streams still work.
            assert await health(channel) == health_pb2.HealthCheckResponse.SERVING
            await settle(daemon)  # the retries fail too while the disk is full
            assert await turn(daemon, stubs, agent_id, n + 1) in ("WRITER_FAILED", "UNAVAILABLE")

            filler.unlink()  # space again: the same daemon, no restart
            n += 2
            assert await turn(daemon, stubs, agent_id, n) == ""
            acknowledged.add(f"m{n}")
            completed.add(str(n))
            await settle(daemon)
            metrics = await asyncio.to_thread(scrape, daemon)
            assert metrics["corral_store_writable"] == 1
            assert metrics["corral_event_log_pending"] == 0  # the kept events went out too
            assert await health(channel) == health_pb2.HealthCheckResponse.SERVING
            prompts, said = await replies(stubs, agent_id)
            assert acknowledged <= prompts
            assert completed <= said
    finally:
        daemon.stop()
    # The stored state, copied off the small disk: the checks below read what was kept, and a
    # daemon starting on a disk its last turns filled again could fail for want of room.
    kept = tmp_path / "kept"
    shutil.copytree(state, kept)
    conn = sqlite3.connect(kept / DB_FILE)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    # What was acknowledged is in the store, not only in the daemon's memory.
    daemon = DaemonThread(Config(state_dir=kept)).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            agents = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
            assert [a.id for a in agents.agents] == [agent_id]
            prompts, said = await replies(stubs, agent_id)
            assert acknowledged <= prompts
            assert completed <= said
    finally:
        daemon.stop()
