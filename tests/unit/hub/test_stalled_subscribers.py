"""A subscriber whose client stopped reading costs the hub nothing it would not hold anyway:
its buffer never keeps events the ring has let go, and `end_one` ends it at once with a resume
point that skips nothing."""

from __future__ import annotations

from corral_server.hub import EventHub, SubscriptionState
from tests.support.hub import poll
from tests.unit.hub.test_event_hub import Agents, drain, encode, publish_rows, rows, state


async def test_a_buffer_whose_oldest_event_left_the_ring_is_dropped_at_the_next_release() -> None:
    hub = EventHub(encode, buffer_events=1_000, retain_events=10)
    slow = hub.subscribe(frozenset(), None, Agents("a1"))
    assert drain(slow) == ["0:upsert a1", "0:synced 0"]
    publish_rows(hub, "a1", range(1, 31))
    # The ring keeps 21..30; the buffer may not keep 1..20 alive: demoted, nothing held.
    assert state(slow) is SubscriptionState.CATCHING_UP
    assert slow.buffered_events == 0
    assert drain(slow) == ["0:reset 0 20", "0:upsert a1", "0:synced 30 reset"]
    assert state(slow) is SubscriptionState.LIVE


async def test_end_one_drops_what_was_not_taken_and_names_what_was_given() -> None:
    hub = EventHub(encode, batch_events=2)
    sub = hub.subscribe(frozenset(), None, Agents("a1"))
    drain(sub)
    publish_rows(hub, "a1", range(1, 6))
    assert poll(sub) is not None  # 1 and 2 taken; 3..5 still buffered
    hub.end_one(sub, "the client did not read for 30 s")
    assert sub.buffered_events == 0
    assert drain(sub) == ["0:ending 2"]
    assert sub.closed and hub.subscriptions == ()


async def test_end_one_before_the_snapshot_was_all_taken_resumes_from_zero() -> None:
    hub = EventHub(encode, batch_events=1)
    sub = hub.subscribe(frozenset(), None, Agents("a1", "a2"))
    assert poll(sub) is not None  # the first upsert only
    hub.end_one(sub, "stalled")
    assert drain(sub) == ["0:ending 0"]


async def test_end_one_of_a_catching_up_subscriber_resumes_where_its_replay_stood() -> None:
    hub = EventHub(encode, batch_events=2)
    publish_rows(hub, "a1", range(1, 9))
    sub = hub.subscribe(frozenset(), 2, Agents("a1"))
    assert poll(sub) is not None  # replays 3, 4
    hub.end_one(sub, "stalled")
    assert drain(sub) == ["0:ending 4"]
    resumed = hub.subscribe(frozenset(), 4, Agents("a1"))
    assert drain(resumed)[:4] == rows("a1", range(5, 9), 5)
