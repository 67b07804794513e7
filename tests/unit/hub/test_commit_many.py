"""commit_many: a batch is numbered consecutively, retained, and handed to each live
subscriber at once, with the same events in the same order as one commit per event; a
subscriber whose buffer cannot take the batch is demoted in O(1) and catches up without a gap.
The timeline writer publishes each append as one batch."""

from __future__ import annotations

from corral_server.clock import FakeClock
from corral_server.domain.events import RowAppended
from corral_server.domain.timeline import AssistantMessage
from corral_server.hub import EventHub, Prepared, SubscriptionState
from corral_server.manager.writer import TimelineWriter
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import NewRow
from tests.support.fakes import RecordingPublisher
from tests.unit.hub.test_event_hub import Agents, drain, encode, row, rows, state


def prepared_rows(hub: EventHub, agent_id: str, seqs: range) -> list[Prepared]:
    return [hub.prepare(row(agent_id, seq)) for seq in seqs]


async def test_a_batch_gets_consecutive_revisions_and_returns_the_last() -> None:
    hub = EventHub(encode)
    hub.publish(row("a1", 1))
    assert hub.commit_many(prepared_rows(hub, "a1", range(2, 5))) == 4
    assert hub.head_revision == 4
    assert hub.commit_many([]) == 4


async def test_a_batch_reaches_every_stream_as_one_commit_per_event_would() -> None:
    batched, single = EventHub(encode), EventHub(encode)
    subs = [h.subscribe(frozenset(), None, Agents()) for h in (batched, single)]
    batched.commit_many(prepared_rows(batched, "a1", range(1, 4)))
    for event in prepared_rows(single, "a1", range(1, 4)):
        single.commit(event)
    expected = ["0:synced 0", *rows("a1", range(1, 4), 1)]
    assert drain(subs[0]) == drain(subs[1]) == expected


async def test_a_batch_of_several_agents_reaches_each_scoped_stream_filtered() -> None:
    hub = EventHub(encode)
    a2 = hub.subscribe(frozenset({"a2"}), None, Agents())
    every = hub.subscribe(frozenset(), None, Agents())
    mixed = [hub.prepare(row(agent, 1)) for agent in ("a1", "a2", "a1", "a2")]
    hub.commit_many(mixed)
    assert drain(a2) == ["0:synced 0", "2:row a2 1", "4:row a2 1"]
    assert drain(every) == ["0:synced 0", "1:row a1 1", "2:row a2 1", "3:row a1 1", "4:row a2 1"]


async def test_a_batch_hands_each_subscriber_one_extend_and_one_wake() -> None:
    hub = EventHub(encode)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    hub.commit_many(prepared_rows(hub, "a1", range(1, 101)))
    # One release for the whole batch: the reader takes all of it as one stream write.
    assert sub.buffered_events == 100
    assert not sub.owed and sub.released
    assert drain(sub) == rows("a1", range(1, 101), 1)


async def test_a_subscriber_whose_buffer_cannot_take_the_batch_catches_up_without_a_gap() -> None:
    hub = EventHub(encode, buffer_events=5, batch_events=3)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    hub.commit_many(prepared_rows(hub, "a1", range(1, 4)))
    hub.commit_many(prepared_rows(hub, "a1", range(4, 7)))  # 3 + 3 > 5: demoted, O(1)
    assert state(sub) is SubscriptionState.CATCHING_UP
    assert sub.buffered_events == 0  # dropped: it replays them from the ring
    hub.commit_many(prepared_rows(hub, "a1", range(7, 9)))
    assert drain(sub) == rows("a1", range(1, 9), 1)
    assert state(sub) is SubscriptionState.LIVE


async def test_a_batch_larger_than_any_buffer_still_reaches_the_subscriber_in_order() -> None:
    hub = EventHub(encode, buffer_events=4, batch_events=4)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    hub.commit_many(prepared_rows(hub, "a1", range(1, 11)))
    assert drain(sub) == rows("a1", range(1, 11), 1)


async def test_the_timeline_writer_publishes_an_append_as_one_batch() -> None:
    publisher = RecordingPublisher()
    timeline = InMemoryTimelineStore()
    head = await timeline.create("a1")
    writer = TimelineWriter(
        "a1",
        head.epoch,
        1,
        timeline=timeline,
        publisher=publisher,
        clock=FakeClock(),
        on_window=lambda: None,
    )
    await writer.append([NewRow(AssistantMessage(f"m{i}"), 0) for i in range(5)])
    assert publisher.batch_sizes == [5]
    assert [e.row.seq for e in publisher.of_type(RowAppended)] == [1, 2, 3, 4, 5]
