"""Paced releases: with a write budget, the hub hands live readers their buffers at most once
per interval (live subscribers / writes_per_s, capped), at once after a quiet spell, and
never holds back a reader that is catching up or ending. A single writer never waits: publish
only schedules. Timed with the FakeClock."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.clock import FakeClock
from corral_server.hub import EventHub, SubscriptionState
from corral_server.hub.pacing import MAX_INTERVAL_MS, Pacer
from tests.unit.hub.test_event_hub import Agents, drain, encode, publish_rows, row, rows, state


def paced_hub(clock: FakeClock, subscribers: int, writes_per_s: int = 1000) -> EventHub:
    """A hub whose release interval is subscribers * 1000 / writes_per_s ms."""
    hub = EventHub(encode, writes_per_s=writes_per_s, clock=clock)
    for _ in range(subscribers):
        drain(hub.subscribe(frozenset(), None, Agents()))
    return hub


async def test_the_first_event_after_a_quiet_spell_is_released_at_once() -> None:
    clock = FakeClock()
    hub = paced_hub(clock, 0)
    sub = hub.subscribe(frozenset(), None, Agents())
    assert drain(sub) == ["0:synced 0"]
    hub.publish(row("a1", 1))
    assert drain(sub) == ["1:row a1 1"]


async def test_events_within_the_interval_wait_for_the_next_release_then_go_as_one_batch() -> None:
    clock = FakeClock()
    hub = paced_hub(clock, 9)  # 10 live subscribers at 1,000 writes/s: one release per 10 ms
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", [1])
    assert drain(sub) == ["1:row a1 1"]
    publish_rows(hub, "a1", [2, 3])
    assert drain(sub) == []  # buffered, not yet released
    assert sub.buffered_events == 2
    await clock.advance(9)
    assert drain(sub) == []
    await clock.advance(1)
    assert drain(sub) == rows("a1", [2, 3], 2)


async def test_a_waiting_reader_is_woken_by_the_paced_release() -> None:
    clock = FakeClock()
    hub = paced_hub(clock, 9)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", [1])
    drain(sub)
    publish_rows(hub, "a1", [2])
    # Waiting now: the reader parks on its future until the release 10 ms later.
    reader = asyncio.ensure_future(anext(sub))
    await asyncio.sleep(0)
    assert not reader.done()
    await clock.advance(10)
    assert reader.done()
    assert reader.result() != b""


async def test_the_interval_is_capped_however_many_subscribers_share_the_budget() -> None:
    clock = FakeClock()
    hub = paced_hub(clock, 999, writes_per_s=10)  # uncapped: 100 s
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", [1, 2])
    drain(sub)
    publish_rows(hub, "a1", [3])
    await clock.advance(int(MAX_INTERVAL_MS) - 1)
    assert drain(sub) == []
    await clock.advance(1)
    assert drain(sub) == rows("a1", [3], 3)


async def test_publish_never_waits_and_a_paced_laggard_is_demoted_as_before() -> None:
    clock = FakeClock()
    hub = EventHub(encode, writes_per_s=100, clock=clock, buffer_events=4)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", range(1, 10))  # nobody reads, nothing is released for 10 ms
    assert state(sub) is SubscriptionState.CATCHING_UP
    # Catching up is not paced: the reader replays at once, then rejoins the live index.
    assert drain(sub) == rows("a1", range(1, 10), 1)
    assert state(sub) is SubscriptionState.LIVE


async def test_an_ended_stream_drains_its_buffer_without_waiting_for_a_release() -> None:
    clock = FakeClock()
    hub = paced_hub(clock, 9)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", [1, 2])
    drain(sub)
    publish_rows(hub, "a1", [3])
    hub.end_all("draining")
    assert drain(sub) == ["3:row a1 3", "0:ending 3"]
    assert clock.pending_timers == 0


async def test_every_paced_stream_gets_the_same_events_in_the_same_order() -> None:
    clock = FakeClock()
    hub = EventHub(encode, writes_per_s=500, clock=clock)
    subs = [hub.subscribe(frozenset(), None, Agents()) for _ in range(3)]
    seen: list[list[str]] = [drain(s) for s in subs]
    for seq in range(1, 31):
        hub.publish(row("a1", seq))
        if seq % 7 == 0:
            await clock.advance(3)
        seen[seq % 3] += drain(subs[seq % 3])
    await clock.advance(6)
    for i, sub in enumerate(subs):
        seen[i] += drain(sub)
    assert seen[0] == seen[1] == seen[2] == ["0:synced 0", *rows("a1", range(1, 31), 1)]


def test_a_pacer_without_a_budget_releases_at_every_request() -> None:
    released: list[int] = []
    pacer = Pacer(lambda: released.append(1), None, FakeClock())
    for _ in range(3):
        pacer.request(100)
    assert released == [1, 1, 1] and not pacer.scheduled


def test_a_pacer_refuses_a_budget_below_one() -> None:
    with pytest.raises(ValueError):
        Pacer(lambda: None, 0, FakeClock())
