"""The AgentRecords contract, run against every backend (tests/support/stores.py): full
snapshots, the last put wins whole, deletes, start-up order."""

from __future__ import annotations

import asyncio

from corral_server.domain.agent import Attention, AttentionReason, Closed, Running, Usage
from tests.support.stores import Records, sample_agent


async def test_a_fresh_store_loads_no_agent(records: Records) -> None:
    store = await records.make_agent_records()
    loaded = await store.load_headers()
    assert (loaded.agents, loaded.bad) == ([], [])


async def test_a_put_agent_loads_back_equal_with_every_field(records: Records) -> None:
    store = await records.make_agent_records()
    agent = sample_agent(
        "a1",
        lifecycle=Running("t7"),
        title="fix the build",
        labels={"team": "core"},
        attention=Attention(True, AttentionReason.FINISHED, 5_000),
        archived_at_ms=9_000,
        last_usage=Usage(10, 20, 3, 0.25),
        provider_session_id="session-1",
    )
    await store.put(agent)
    assert (await store.load_headers()).agents == [agent]


async def test_the_last_put_of_an_agent_wins_whole(records: Records) -> None:
    store = await records.make_agent_records()
    archived = sample_agent("a1", archived_at_ms=9_000, title="old")
    await store.put(archived)
    later = sample_agent("a1", title="new", updated_at_ms=2_000)  # not archived any more
    await store.put(later)
    assert (await store.load_headers()).agents == [later]


async def test_a_put_never_erases_a_field_its_snapshot_carries(records: Records) -> None:
    store = await records.make_agent_records()
    archived = sample_agent("a1", archived_at_ms=9_000)
    await store.put(archived)
    # The seed-000 trap: a later write about something else must carry the archive mark.
    renamed = sample_agent("a1", archived_at_ms=9_000, title="renamed", updated_at_ms=9_500)
    await store.put(renamed)
    [loaded] = (await store.load_headers()).agents
    assert loaded.archived_at_ms == 9_000 and loaded.title == "renamed"


async def test_puts_not_awaited_between_them_all_resolve_and_the_last_wins(
    records: Records,
) -> None:
    store = await records.make_agent_records()
    futures = [store.put(sample_agent("a1", updated_at_ms=n)) for n in range(1, 51)]
    await asyncio.gather(*futures)
    assert [a.updated_at_ms for a in (await store.load_headers()).agents] == [50]


async def test_agents_load_in_the_order_of_their_first_put(records: Records) -> None:
    store = await records.make_agent_records()
    for agent_id in ("c", "a", "b"):
        await store.put(sample_agent(agent_id))
    await store.put(sample_agent("a", lifecycle=Closed(7_000)))  # rewriting keeps its place
    loaded = (await store.load_headers()).agents
    assert [a.id for a in loaded] == ["c", "a", "b"]
    assert loaded[1].lifecycle == Closed(7_000)


async def test_a_deleted_agent_no_longer_loads(records: Records) -> None:
    store = await records.make_agent_records()
    await store.put(sample_agent("a1"))
    await store.put(sample_agent("a2"))
    await store.delete("a1")
    await store.delete("never-there")
    assert [a.id for a in (await store.load_headers()).agents] == ["a2"]


async def test_a_delete_after_a_put_in_one_batch_wins(records: Records) -> None:
    store = await records.make_agent_records()
    await asyncio.gather(store.put(sample_agent("a1")), store.delete("a1"))
    assert (await store.load_headers()).agents == []
    await asyncio.gather(store.delete("a1"), store.put(sample_agent("a1", title="back")))
    assert [a.title for a in (await store.load_headers()).agents] == ["back"]
