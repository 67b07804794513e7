"""Prometheus metrics (`--metrics-listen`), scraped over HTTP from a real daemon after a known
sequence of calls: exactly the turns, events, rows, agents and error answers of that sequence
(each daemon counts into its own registry, so a call counted twice, or another daemon's,
shows); with a state directory the store's commits (latency and batch size), provider call
latency by kind, and the event log's pending events and failed commits while its commits
fail."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.hub.log_writer import RETRY_FIRST_S
from tests.support.client import Stubs, create_request, prompt_request, text
from tests.support.daemon import DaemonThread
from tests.support.web import Web, WebError

TIMEOUT = 60.0  # generous: a 2-core machine running the suite in parallel is slow
OUTCOMES = ("started", "completed", "failed", "canceled")
STATES = ("initializing", "idle", "running", "errored", "closed")


@pytest.fixture
def measured() -> Iterator[DaemonThread]:
    config = Config(metrics_listen="127.0.0.1:0", web_listen="127.0.0.1:0")
    daemon = DaemonThread(config).start()
    yield daemon
    daemon.stop()


@pytest.fixture
def stored(tmp_path: Any) -> Iterator[DaemonThread]:
    """A daemon with a state directory: the SQLite store and the durable event log."""
    config = Config(metrics_listen="127.0.0.1:0", state_dir=tmp_path / "state")
    daemon = DaemonThread(config).start()
    yield daemon
    daemon.stop()


def scrape(daemon: DaemonThread) -> dict[str, float]:
    assert daemon.daemon is not None
    url = f"http://127.0.0.1:{daemon.daemon.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = reply.read().decode()
    values: dict[str, float] = {}
    for line in body.splitlines():
        match = re.fullmatch(r"(corral_[a-z_]+(?:\{[^}]*\})?) (\S+)", line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


def errors_of(values: dict[str, float]) -> dict[str, float]:
    """The error answers by code: `corral_rpc_errors_total{code="NOT_FOUND"}` -> NOT_FOUND."""
    prefix = 'corral_rpc_errors_total{code="'
    return {k[len(prefix) : -2]: v for k, v in values.items() if k.startswith(prefix)}


async def test_the_counters_are_exactly_the_daemons_own(
    measured: DaemonThread, tmp_path: Any
) -> None:
    before = await asyncio.to_thread(scrape, measured)
    assert before['corral_turns_total{outcome="started"}'] == 0
    assert errors_of(before) == {}
    async with grpc.aio.insecure_channel(measured.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        for prompt in ("hello", "/fail broken"):
            call = stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
            )
            _ = [e async for e in call]
        for _ in range(2):
            with pytest.raises(grpc.aio.AioRpcError):
                await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id="f" * 32))
        # The web edge answers from the same servicers and counts into the same counter.
        assert measured.daemon is not None
        base = f"http://127.0.0.1:{measured.daemon.web_port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            refused = await Web(client).unary(
                "AgentService/GetAgent",
                svc_pb.GetAgentRequest(agent_id="f" * 32),
                svc_pb.GetAgentResponse,
            )
        assert isinstance(refused, WebError) and refused.code == "not_found"
        rows = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
        info = await server_grpc.ServerServiceStub(channel).GetServerInfo(
            server_pb.GetServerInfoRequest()
        )
    after = await asyncio.to_thread(scrape, measured)
    turns = {o: after[f'corral_turns_total{{outcome="{o}"}}'] for o in OUTCOMES}
    assert turns == {"started": 2, "completed": 1, "failed": 1, "canceled": 0}
    assert errors_of(after) == {"NOT_FOUND": 3}  # two over gRPC, one over the web
    assert after["corral_events_total"] == info.head_revision
    assert after["corral_timeline_rows"] == len(rows.rows)
    agents = {s: after[f'corral_agents{{state="{s}"}}'] for s in STATES}
    assert agents == {"initializing": 0, "idle": 0, "running": 0, "errored": 1, "closed": 0}
    assert after["corral_subscribers"] == 0


def calls(kind: str) -> str:
    return f'corral_provider_call_seconds_count{{kind="{kind}"}}'


def calls_of(values: dict[str, float]) -> dict[str, float]:
    """The provider calls timed, by kind."""
    prefix = 'corral_provider_call_seconds_count{kind="'
    return {k[len(prefix) : -2]: v for k, v in values.items() if k.startswith(prefix)}


async def after_a_turn(stubs: Stubs, cwd: str) -> str:
    """A new agent's id, once one turn ("hello") ran to its end on it."""
    agent_id = (await stubs.agents.CreateAgent(create_request(cwd))).agent.id
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("hello"))
    )
    _ = [e async for e in call]
    return agent_id


async def test_store_commits_and_provider_calls_are_timed(
    stored: DaemonThread, tmp_path: Any
) -> None:
    before = await asyncio.to_thread(scrape, stored)
    assert calls_of(before) == {}  # the daemon's own table: no other daemon's calls in it
    async with grpc.aio.insecure_channel(stored.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = await after_a_turn(stubs, str(tmp_path))
        # A turn that sleeps on the daemon's (fake) clock until it is interrupted.
        await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 600000"))
        canceled = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
        assert canceled.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
        await stubs.agents.CloseAgent(svc_pb.CloseAgentRequest(agent_id=agent_id))
    after = await asyncio.to_thread(scrape, stored)
    assert calls_of(after) == {"create_session": 1, "start_turn": 2, "interrupt": 1, "close": 1}
    assert after['corral_provider_call_seconds_bucket{kind="start_turn",le="+Inf"}'] == 2
    assert after['corral_provider_call_seconds_sum{kind="start_turn"}'] > 0
    # The store's own transactions, each counted once: as many as the store committed.
    database = stored.daemon.database if stored.daemon else None
    assert database is not None
    count = "corral_store_commit_seconds_count"
    settled = await until_scraped(
        stored, lambda v: v[count] == database.commits, "one count per transaction"
    )
    assert settled[count] >= before[count] + 4  # the agent, its rows, its turns, its events
    assert settled['corral_store_commit_seconds_bucket{le="+Inf"}'] == settled[count]
    assert settled["corral_store_commit_seconds_sum"] > before["corral_store_commit_seconds_sum"]
    assert settled["corral_store_commit_jobs_count"] == settled[count]  # one per transaction
    assert settled["corral_store_commit_jobs_sum"] >= settled[count]  # at least a job in each


async def test_two_daemons_in_one_process_time_their_provider_calls_apart(
    measured: DaemonThread, tmp_path: Any
) -> None:
    other = DaemonThread(Config(metrics_listen="127.0.0.1:0")).start()
    try:
        async with grpc.aio.insecure_channel(measured.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = await after_a_turn(stubs, str(tmp_path))
            await stubs.agents.CloseAgent(svc_pb.CloseAgentRequest(agent_id=agent_id))
        async with grpc.aio.insecure_channel(other.address) as channel:
            await Stubs.of(channel).agents.CreateAgent(create_request(str(tmp_path)))
        mine = await asyncio.to_thread(scrape, measured)
        theirs = await asyncio.to_thread(scrape, other)
    finally:
        other.stop()
    assert calls_of(mine) == {"create_session": 1, "start_turn": 1, "close": 1}
    assert calls_of(theirs) == {"create_session": 1}


async def until_scraped(
    daemon: DaemonThread, condition: Callable[[dict[str, float]], bool], what: str
) -> dict[str, float]:
    """Scrape until `condition` holds (the store's thread settles on its own time)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        values = await asyncio.to_thread(scrape, daemon)
        if condition(values):
            return values
        await asyncio.sleep(0.01)  # a polling interval; nothing depends on its length
    raise AssertionError(f"the metrics never showed {what}")


def sql(daemon: DaemonThread, statement: str) -> None:
    """Run `statement` in the daemon's store, committed like any write."""
    database = daemon.daemon.database if daemon.daemon else None
    assert database is not None

    def run(conn: sqlite3.Connection) -> None:
        conn.execute(statement)

    daemon.run(database.write(run))


async def test_the_event_logs_pending_events_and_failed_commits_are_counted(
    stored: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(stored.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        before = await until_scraped(
            stored, lambda v: v["corral_event_log_pending"] == 0, "no events pending"
        )
        assert before["corral_event_log_failures_total"] == 0
        # A full disk, as far as the event log can tell: its next commit fails.
        sql(
            stored,
            "CREATE TRIGGER full BEFORE INSERT ON event_runs "
            "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
        )
        update = svc_pb.UpdateAgentRequest(agent_id=agent_id, title="renamed")
        updating = asyncio.ensure_future(stubs.agents.UpdateAgent(update, timeout=TIMEOUT))
        stalled = await until_scraped(
            stored, lambda v: v["corral_event_log_failures_total"] >= 1, "a failed commit"
        )
        assert stalled["corral_event_log_failures_total"] == 1  # retried on the clock only
        assert stalled["corral_event_log_pending"] >= 1  # numbered, kept, not published
        # The disk has room again; the log retries after its back-off (on the daemon's clock).
        sql(stored, "DROP TRIGGER full")
        await stored.advance_async(int(RETRY_FIRST_S * 1000))
        await updating
        after = await until_scraped(
            stored, lambda v: v["corral_event_log_pending"] == 0, "the events committed"
        )
        assert after["corral_event_log_failures_total"] == 1
