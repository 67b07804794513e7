"""The CreateRequests and FinishedTurns contracts, run against every backend
(tests/support/stores.py)."""

from __future__ import annotations

import asyncio

from tests.support.stores import Records

# --- create request ids ---------------------------------------------------------------------


async def test_an_unknown_request_id_is_not_found(records: Records) -> None:
    requests = await records.make_create_requests()
    assert await requests.find("r1") is None


async def test_a_remembered_request_is_found_with_its_fingerprint_and_agent(
    records: Records,
) -> None:
    requests = await records.make_create_requests()
    await requests.remember("r1", b"\x01fingerprint", "agent-1", 1_000)
    assert await requests.find("r1") == (b"\x01fingerprint", "agent-1")
    assert await requests.find("r2") is None


async def test_a_request_is_found_before_its_write_commits(records: Records) -> None:
    requests = await records.make_create_requests()
    written = requests.remember("r1", b"f", "agent-1", 1_000)
    assert await requests.find("r1") == (b"f", "agent-1")
    await written


async def test_there_is_no_window_every_request_id_is_kept(records: Records) -> None:
    requests = await records.make_create_requests()
    # The old in-memory table kept the newest 10,000: the first id was forgotten.
    await asyncio.gather(
        *(requests.remember(f"r{n}", b"f", f"agent-{n}", n) for n in range(10_050))
    )
    assert await requests.find("r0") == (b"f", "agent-0")
    assert await requests.find("r10049") == (b"f", "agent-10049")


async def test_remembering_an_id_again_replaces_its_entry(records: Records) -> None:
    requests = await records.make_create_requests()
    await requests.remember("r1", b"old", "agent-1", 1_000)
    await requests.remember("r1", b"new", "agent-2", 2_000)
    assert await requests.find("r1") == (b"new", "agent-2")


# --- finished turns -------------------------------------------------------------------------


async def test_a_turn_not_added_is_not_finished(records: Records) -> None:
    turns = await records.make_finished_turns()
    assert not await turns.contains("a1", "t1")


async def test_an_added_turn_is_finished_for_its_agent_only(records: Records) -> None:
    turns = await records.make_finished_turns()
    await turns.add("a1", "t1")
    assert await turns.contains("a1", "t1")
    assert not await turns.contains("a2", "t1")
    assert not await turns.contains("a1", "t2")


async def test_a_turn_is_finished_as_soon_as_it_is_added(records: Records) -> None:
    turns = await records.make_finished_turns()
    added = turns.add("a1", "t1")
    assert await turns.contains("a1", "t1")
    await added


async def test_every_finished_turn_stays_finished_not_only_the_recent(
    records: Records,
) -> None:
    turns = await records.make_finished_turns()
    for n in range(100):
        turns.add("a1", f"t{n}")
    await turns.add("a1", "last")
    assert all([await turns.contains("a1", f"t{n}") for n in range(100)])


async def test_adding_a_turn_twice_is_harmless(records: Records) -> None:
    turns = await records.make_finished_turns()
    await asyncio.gather(turns.add("a1", "t1"), turns.add("a1", "t1"))
    await turns.add("a1", "t1")
    assert await turns.contains("a1", "t1")


async def test_dropping_an_agent_forgets_its_turns_only(records: Records) -> None:
    turns = await records.make_finished_turns()
    await turns.add("a1", "t1")
    await turns.add("a2", "t1")
    dropped = turns.drop("a1")
    assert not await turns.contains("a1", "t1")  # at once, before the drop commits
    await dropped
    assert not await turns.contains("a1", "t1")
    assert await turns.contains("a2", "t1")


async def test_a_turn_added_after_a_drop_is_finished(records: Records) -> None:
    turns = await records.make_finished_turns()
    await turns.add("a1", "old")
    dropping = turns.drop("a1")
    added = turns.add("a1", "new")
    assert await turns.contains("a1", "new")
    assert not await turns.contains("a1", "old")
    await asyncio.gather(dropping, added)
    assert await turns.contains("a1", "new")
    assert not await turns.contains("a1", "old")
