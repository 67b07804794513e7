"""Usage and cost through the wire (AgentService.GetUsage, Agent.usage_total, the metrics), on
a daemon with a state directory: totals add up each completed turn's reported usage, group by
agent, provider, model and day, narrow by agents and time, page, survive a restart and a
rewind, are counted by provider and model for Prometheus, and a state directory from before
the ledger opens with nothing counted and counts from then on."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from corral.storage.v1 import records_pb2
from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.clock import FakeClock
from tests.integration.test_metrics import scrape
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import DaemonThread

DAY_MS = 86_400_000
START_MS = 1_700_000_000_000  # FakeClock's start: 2023-11-14 22:13:20 UTC
AGENT = svc_pb.USAGE_GROUP_BY_AGENT
PROVIDER = svc_pb.USAGE_GROUP_BY_PROVIDER
MODEL = svc_pb.USAGE_GROUP_BY_MODEL
DAY = svc_pb.USAGE_GROUP_BY_DAY


def daemon_on(state_dir: Path) -> DaemonThread:
    config = Config(state_dir=state_dir, metrics_listen="127.0.0.1:0")
    return DaemonThread(config, FakeClock()).start()


@contextlib.asynccontextmanager
async def serving(state_dir: Path) -> AsyncIterator[tuple[DaemonThread, Stubs]]:
    daemon = daemon_on(state_dir)
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield daemon, Stubs.of(channel)
    finally:
        daemon.stop()


@pytest.fixture
async def durable(tmp_path: Path) -> AsyncIterator[tuple[DaemonThread, Stubs]]:
    async with serving(tmp_path / "state") as both:
        yield both


async def turn(stubs: Stubs, agent_id: str, *lines: str) -> tuple[str, tuple[int, int]]:
    """Run a turn; its id and the (input, output) tokens it reported."""
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    events = [e async for e in call]
    reported = [tokens(e.usage) for e in events if e.HasField("usage")]
    return events[0].turn_started.turn_id, plus(*reported)


def tokens(usage: agent_pb2.Usage) -> tuple[int, int]:
    return usage.input_tokens, usage.output_tokens


def plus(*pairs: tuple[int, int]) -> tuple[int, int]:
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


async def usage(
    stubs: Stubs, *group_by: svc_pb.UsageGroupBy.ValueType, **kw: Any
) -> svc_pb.GetUsageResponse:
    return await stubs.agents.GetUsage(svc_pb.GetUsageRequest(group_by=group_by, **kw))


async def agent_total(stubs: Stubs, agent_id: str) -> tuple[int, int]:
    reply = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
    return tokens(reply.agent.usage_total)


async def test_totals_add_up_turns_and_group_by_agent_provider_model_and_day(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path
) -> None:
    daemon, stubs = durable
    created = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    one, model = created.id, created.model
    two = (
        await stubs.agents.CreateAgent(create_request(str(tmp_path), labels={"team": "blue"}))
    ).agent.id
    _, a = await turn(stubs, one, "first words here", "/reply one two three")
    _, b = await turn(stubs, two, "/reply four five")
    await turn(stubs, two, "/fail nothing counted")  # a failed turn reports no usage
    daemon.advance(DAY_MS)
    _, c = await turn(stubs, one, "/reply six")
    assert await agent_total(stubs, one) == plus(a, c)
    assert await agent_total(stubs, two) == b

    total = await usage(stubs)
    assert (tokens(total.total), total.turns) == (plus(a, b, c), 3)
    assert [(g.agent_id, g.provider, g.day) for g in total.groups] == [("", "", "")]

    by_agent = await usage(stubs, AGENT)
    assert {g.agent_id: (tokens(g.usage), g.turns) for g in by_agent.groups} == {
        one: (plus(a, c), 2),
        two: (b, 1),
    }
    by_day = await usage(stubs, DAY, PROVIDER, MODEL)
    assert [(g.day, g.provider, g.model, tokens(g.usage)) for g in by_day.groups] == [
        ("2023-11-14", "scripted", model, plus(a, b)),
        ("2023-11-15", "scripted", model, c),
    ]
    blue = await usage(stubs, AGENT, label_selector="team=blue")
    assert [(g.agent_id, tokens(g.usage)) for g in blue.groups] == [(two, b)]
    only = await usage(stubs, agent_ids=[one])
    assert tokens(only.total) == plus(a, c)
    later = await usage(stubs, start_time=Timestamp(seconds=(START_MS + DAY_MS) // 1000))
    assert (tokens(later.total), later.turns) == (c, 1)
    earlier = await usage(stubs, end_time=Timestamp(seconds=(START_MS + DAY_MS) // 1000))
    assert tokens(earlier.total) == plus(a, b)


async def test_groups_come_a_page_at_a_time_with_the_total_of_all(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path
) -> None:
    _, stubs = durable
    agents = []
    for i in range(3):
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        await turn(stubs, agent_id, f"/reply {'word ' * (i + 1)}")
        agents.append(agent_id)
    first = await usage(stubs, AGENT, page_size=2)
    assert len(first.groups) == 2 and first.next_page_token and first.turns == 3
    second = await usage(stubs, AGENT, page_size=2, page_token=first.next_page_token)
    assert len(second.groups) == 1 and not second.next_page_token
    assert sorted(g.agent_id for g in [*first.groups, *second.groups]) == sorted(agents)
    assert second.total == first.total


async def test_bad_requests_are_invalid_arguments_naming_the_field(
    durable: tuple[DaemonThread, Stubs],
) -> None:
    _, stubs = durable
    at = Timestamp(seconds=START_MS // 1000)
    for request, field in [
        (svc_pb.GetUsageRequest(group_by=[svc_pb.UsageGroupBy.ValueType(99)]), "group_by[0]"),
        (svc_pb.GetUsageRequest(page_size=1001), "page_size"),
        (svc_pb.GetUsageRequest(start_time=at, end_time=at), "end_time"),
        (svc_pb.GetUsageRequest(page_token="bogus"), "page_token"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stubs.agents.GetUsage(request)
        details = error_details(raised.value)
        assert details.code is grpc.StatusCode.INVALID_ARGUMENT
        assert details.fields == (field,)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stubs.agents.GetUsage(svc_pb.GetUsageRequest(agent_ids=["f" * 32]))
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND


async def test_totals_survive_a_restart_and_a_rewind_and_feed_the_metrics(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with serving(state) as (_, stubs):
        created = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
        agent_id, model = created.id, created.model
        _, a = await turn(stubs, agent_id, "/echo", "/reply one two")
        second, b = await turn(stubs, agent_id, "/echo", "/reply three")
        await stubs.turns.Rewind(
            turn_pb.RewindRequest(agent_id=agent_id, message_id=f"{second}-user")
        )
        assert await agent_total(stubs, agent_id) == plus(a, b)  # spent stays spent
    async with serving(state) as (again, stubs):
        assert await agent_total(stubs, agent_id) == plus(a, b)
        assert tokens((await usage(stubs, AGENT)).groups[0].usage) == plus(a, b)
        _, c = await turn(stubs, agent_id, "/reply four")
        assert await agent_total(stubs, agent_id) == plus(a, b, c)
        metrics = await asyncio.to_thread(scrape, again)
    labels = f'{{model="{model}",provider="scripted"}}'
    assert metrics[f"corral_usage_input_tokens_total{labels}"] == plus(a, b, c)[0]
    assert metrics[f"corral_usage_output_tokens_total{labels}"] == plus(a, b, c)[1]
    assert metrics[f"corral_usage_turns_total{labels}"] == 3
    assert metrics[f"corral_usage_cost_usd_total{labels}"] == 0


def as_before_the_ledger(state: Path) -> None:
    """Leave the database as a daemon from before usage totals did: no ledger table, schema
    version 8, agent records without `usage_total`."""
    with closing(sqlite3.connect(state / "corral.db")) as conn, conn:
        conn.execute("DROP TABLE turn_usage")
        for agent_id, record in conn.execute("SELECT agent_id, record FROM agents").fetchall():
            agent = records_pb2.Agent.FromString(record)
            agent.ClearField("usage_total")
            conn.execute(
                "UPDATE agents SET record = ? WHERE agent_id = ?",
                (agent.SerializeToString(), agent_id),
            )
        conn.execute("PRAGMA user_version = 8")
    conn.close()


async def test_a_state_directory_from_before_the_ledger_counts_from_the_upgrade(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with serving(state) as (_, stubs):
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        await turn(stubs, agent_id, "/reply before the upgrade")
    as_before_the_ledger(state)
    async with serving(state) as (_, stubs):
        assert await agent_total(stubs, agent_id) == (0, 0)
        empty = await usage(stubs, AGENT)
        assert (list(empty.groups), empty.turns) == ([], 0)
        _, a = await turn(stubs, agent_id, "/reply after it")
        assert await agent_total(stubs, agent_id) == a
        counted = await usage(stubs, AGENT)
        assert [(g.agent_id, tokens(g.usage)) for g in counted.groups] == [(agent_id, a)]
