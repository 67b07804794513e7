"""EventHub without grpc: revisions, snapshot + synced + live, scope, resume, laggards, drain.

The encoder here writes a short text per event ("row a1 3") after the revision, written as
protobuf writes `Event.revision` (field 1 first, omitted when 0: the hub numbers a prepared
event by prepending it), so a batch unframes into readable items ("7:row a1 3") and a test can
state the exact stream a subscriber must see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral_server.domain.agent import Agent
from corral_server.domain.events import (
    AgentRemoved,
    AgentUpserted,
    Event,
    RowAppended,
    StreamControl,
    StreamEnding,
    SubscriptionReset,
    Synced,
)
from corral_server.domain.timeline import AssistantMessage, TimelineRow
from corral_server.errors import ShuttingDown
from corral_server.hub import EventHub, Subscription, SubscriptionState, frame
from corral_server.hub.ring import revision_field
from tests.support.fakes import idle_agent as agent
from tests.support.hub import poll


def describe(event: Event | StreamControl) -> str:
    match event:
        case AgentUpserted(agent=agent):
            return f"upsert {agent.id}"
        case RowAppended(agent_id=agent_id, row=row):
            return f"row {agent_id} {row.seq}"
        case Synced(revision=revision, reset=reset):
            return f"synced {revision}" + (" reset" if reset else "")
        case SubscriptionReset(requested_revision=requested, earliest_revision=earliest):
            return f"reset {requested} {earliest}"
        case StreamEnding(resume_revision=resume):
            return f"ending {resume}"
        case _:
            return type(event).__name__


def encode(revision: int, event: Event | StreamControl) -> bytes:
    head = revision_field(revision) if revision else b""
    return head + describe(event).encode()


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def unframe(batch: bytes) -> list[str]:
    """Split a SubscribeResponse payload into its events (tag 0x0A, varint length, bytes)."""
    items: list[str] = []
    i = 0
    while i < len(batch):
        assert batch[i] == 0x0A
        length, i = read_varint(batch, i + 1)
        payload = batch[i : i + length]
        revision, start = read_varint(payload, 1) if payload[:1] == b"\x08" else (0, 0)
        items.append(f"{revision}:{payload[start:].decode()}")
        i += length
    assert i == len(batch)
    return items


def row(agent_id: str, seq: int) -> RowAppended:
    return RowAppended(agent_id, "e1", TimelineRow(seq, 0, AssistantMessage(f"text {seq}")))


class Agents:
    """The snapshot source: the agents that exist, filtered by scope like the manager does."""

    def __init__(self, *ids: str) -> None:
        self.agents = [agent(i) for i in ids]
        self.calls = 0

    def __call__(self, scope: frozenset[str]) -> Sequence[Agent]:
        self.calls += 1
        return [a for a in self.agents if not scope or a.id in scope]


def drain(sub: Subscription) -> list[str]:
    """Everything the subscription has ready now, without waiting."""
    items: list[str] = []
    while (batch := poll(sub)) is not None:
        items += unframe(batch)
    return items


def state(sub: Subscription) -> SubscriptionState:
    """The subscription's state, read afresh: mypy would carry what an earlier assert about
    `sub.state` narrowed it to across the calls that change it."""
    return sub.state


def batches(sub: Subscription) -> list[list[str]]:
    out: list[list[str]] = []
    while (batch := poll(sub)) is not None:
        out.append(unframe(batch))
    return out


def rows(agent_id: str, seqs: Iterable[int], first_revision: int) -> list[str]:
    return [f"{first_revision + i}:row {agent_id} {seq}" for i, seq in enumerate(seqs)]


def publish_rows(hub: EventHub, agent_id: str, seqs: Iterable[int]) -> None:
    for seq in seqs:
        hub.publish(row(agent_id, seq))


async def test_revisions_start_at_one_and_increase_by_one_per_published_event() -> None:
    hub = EventHub(encode)
    assert hub.head_revision == 0
    assert [hub.publish(row("a1", s)) for s in (1, 2, 3)] == [1, 2, 3]
    assert hub.head_revision == 3


async def test_fresh_subscription_gets_snapshot_then_synced_then_live_events() -> None:
    hub = EventHub(encode)
    publish_rows(hub, "a1", [1, 2])
    sub = hub.subscribe(frozenset(), None, Agents("a1", "a2"))
    assert drain(sub) == ["0:upsert a1", "0:upsert a2", "0:synced 2"]
    publish_rows(hub, "a1", [3])
    hub.publish(AgentRemoved("a2"))
    assert drain(sub) == ["3:row a1 3", "4:AgentRemoved"]
    assert state(sub) is SubscriptionState.LIVE
    assert sub.delivered_revision == 4


async def test_a_waiting_reader_is_woken_by_publish() -> None:
    hub = EventHub(encode)
    sub = hub.subscribe(frozenset(), None, Agents())
    assert unframe(await anext(sub)) == ["0:synced 0"]
    reader = asyncio.create_task(anext(sub))
    await asyncio.sleep(0)
    assert not reader.done()
    hub.publish(row("a1", 1))
    assert unframe(await asyncio.wait_for(reader, 5)) == ["1:row a1 1"]


async def test_two_subscribers_with_the_same_scope_get_byte_identical_streams() -> None:
    hub = EventHub(encode, batch_events=3)
    agents = Agents("a1")
    first = hub.subscribe(frozenset({"a1"}), None, agents)
    second = hub.subscribe(frozenset({"a1"}), None, agents)
    received: dict[Subscription, bytes] = {first: b"", second: b""}
    for seq in range(1, 11):
        hub.publish(row("a1", seq))
        hub.publish(row("a2", seq))
        # Read at different paces: batch boundaries differ, bytes must not.
        for sub in (first,) if seq % 3 else (first, second):
            while (batch := poll(sub)) is not None:
                received[sub] += batch
    received[second] += b"".join(iter(lambda: poll(second), None))
    assert received[first] == received[second]
    assert unframe(received[first])[-1] == "19:row a1 10"


async def test_a_scoped_subscription_sees_only_its_agents() -> None:
    hub = EventHub(encode)
    sub = hub.subscribe(frozenset({"a1", "a3"}), None, Agents("a1", "a2", "a3"))
    for agent_id in ("a1", "a2", "a3", "a4"):
        hub.publish(row(agent_id, 1))
    assert drain(sub) == [
        "0:upsert a1",
        "0:upsert a3",
        "0:synced 0",
        "1:row a1 1",
        "3:row a3 1",
    ]


async def test_resume_inside_the_window_replays_exactly_the_missed_events_then_synced() -> None:
    hub = EventHub(encode, retain_events=100)
    publish_rows(hub, "a1", range(1, 11))
    agents = Agents("a1")
    sub = hub.subscribe(frozenset(), 6, agents)
    assert drain(sub) == [*rows("a1", range(7, 11), 7), "0:synced 10"]
    assert agents.calls == 0
    publish_rows(hub, "a1", [11])
    assert drain(sub) == ["11:row a1 11"]
    assert state(sub) is SubscriptionState.LIVE


async def test_resume_at_the_head_sends_synced_and_then_live_events() -> None:
    hub = EventHub(encode)
    publish_rows(hub, "a1", [1, 2])
    sub = hub.subscribe(frozenset(), 2, Agents("a1"))
    assert drain(sub) == ["0:synced 2"]
    publish_rows(hub, "a1", [3])
    assert drain(sub) == ["3:row a1 3"]


async def test_a_scoped_resume_replays_only_its_agents_events() -> None:
    hub = EventHub(encode, batch_events=2)
    for seq in range(1, 6):
        hub.publish(row("a1", seq))
        hub.publish(row("a2", seq))
    sub = hub.subscribe(frozenset({"a2"}), 3, Agents())
    assert drain(sub) == [
        "4:row a2 2",
        "6:row a2 3",
        "8:row a2 4",
        "10:row a2 5",
        "0:synced 10",
    ]


async def test_resume_older_than_the_window_gets_reset_snapshot_and_synced_reset() -> None:
    hub = EventHub(encode, retain_events=5)
    publish_rows(hub, "a1", range(1, 21))
    assert hub.earliest_resumable_revision == 15
    sub = hub.subscribe(frozenset(), 14, Agents("a1"))
    assert drain(sub) == ["0:reset 14 15", "0:upsert a1", "0:synced 20 reset"]
    publish_rows(hub, "a1", [21])
    assert drain(sub) == ["21:row a1 21"]


async def test_resume_at_the_oldest_retained_point_replays_the_whole_ring() -> None:
    hub = EventHub(encode, retain_events=5)
    publish_rows(hub, "a1", range(1, 21))
    sub = hub.subscribe(frozenset(), 15, Agents("a1"))
    assert drain(sub) == [*rows("a1", range(16, 21), 16), "0:synced 20"]


async def test_resume_ahead_of_the_head_gets_an_explicit_reset() -> None:
    hub = EventHub(encode)
    publish_rows(hub, "a1", [1, 2])
    sub = hub.subscribe(frozenset(), 9, Agents("a1"))
    assert drain(sub) == ["0:reset 9 0", "0:upsert a1", "0:synced 2 reset"]


async def test_a_subscriber_that_stops_reading_is_moved_out_of_publish_and_catches_up() -> None:
    hub = EventHub(encode, buffer_events=4, batch_events=3, retain_events=1_000)
    slow = hub.subscribe(frozenset(), None, Agents("a1"))
    fast = hub.subscribe(frozenset(), None, Agents("a1"))
    fast_items = drain(fast)
    for seq in range(1, 101):
        hub.publish(row("a1", seq))
        fast_items += drain(fast)
    # The hub stopped handing `slow` events once its buffer was full, and dropped the
    # buffer: it replays everything from the ring; `fast` got everything live meanwhile.
    assert state(slow) is SubscriptionState.CATCHING_UP
    assert slow.buffered_events == 0
    assert fast_items == ["0:upsert a1", "0:synced 0", *rows("a1", range(1, 101), 1)]
    assert state(fast) is SubscriptionState.LIVE
    slow_batches = batches(slow)
    assert [item for batch in slow_batches for item in batch] == fast_items
    assert max(len(batch) for batch in slow_batches) == 3
    assert state(slow) is SubscriptionState.LIVE
    publish_rows(hub, "a1", [101])
    assert drain(slow) == ["101:row a1 101"]


async def test_a_scoped_laggard_catches_up_across_other_agents_events() -> None:
    hub = EventHub(encode, buffer_events=2, batch_events=2, retain_events=10_000)
    slow = hub.subscribe(frozenset({"a2"}), 0, Agents())
    assert drain(slow) == ["0:synced 0"]
    for seq in range(1, 2_001):
        hub.publish(row("a1", seq))
        if seq % 500 == 0:
            hub.publish(row("a2", seq))
    assert state(slow) is SubscriptionState.CATCHING_UP
    assert drain(slow) == [
        "501:row a2 500",
        "1002:row a2 1000",
        "1503:row a2 1500",
        "2004:row a2 2000",
    ]
    assert state(slow) is SubscriptionState.LIVE


async def test_a_laggard_whose_resume_point_left_the_ring_gets_reset_then_live() -> None:
    hub = EventHub(encode, buffer_events=4, retain_events=16)
    slow = hub.subscribe(frozenset(), None, Agents("a1"))
    assert drain(slow) == ["0:upsert a1", "0:synced 0"]
    publish_rows(hub, "a1", range(1, 41))
    # Demoted at its 5th event with nothing taken, it replays from 0: gone from the ring.
    assert drain(slow) == ["0:reset 0 24", "0:upsert a1", "0:synced 40 reset"]
    assert state(slow) is SubscriptionState.LIVE
    publish_rows(hub, "a1", [41])
    assert drain(slow) == ["41:row a1 41"]


async def test_a_laggard_overtaken_while_replaying_a_resume_gets_reset() -> None:
    hub = EventHub(encode, batch_events=2, retain_events=8)
    publish_rows(hub, "a1", range(1, 9))
    sub = hub.subscribe(frozenset(), 2, Agents("a1"))
    assert unframe(await anext(sub)) == ["3:row a1 3", "4:row a1 4"]
    publish_rows(hub, "a1", range(9, 21))
    assert drain(sub) == ["0:reset 4 12", "0:upsert a1", "0:synced 20 reset"]


async def test_a_burst_is_delivered_in_batches_of_batch_events() -> None:
    hub = EventHub(encode, batch_events=512)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", range(1, 2_001))
    sizes = [len(batch) for batch in batches(sub)]
    assert sizes == [512, 512, 512, 464]


async def test_batch_bytes_bounds_the_size_of_a_batch() -> None:
    hub = EventHub(encode, batch_events=512, batch_bytes=100)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", range(1, 21))
    sent: list[bytes] = []
    while (batch := poll(sub)) is not None:
        sent.append(batch)
    # Frames of revisions 1-9 are 12 bytes and 10-20 are 13 bytes: a batch ends before the
    # frame that would cross 100 bytes (8 x 12; 12 + 6 x 13; the 5 left).
    assert [len(unframe(batch)) for batch in sent] == [8, 7, 5]
    assert [len(batch) for batch in sent] == [96, 90, 65]


async def test_only_an_event_that_alone_exceeds_batch_bytes_makes_a_bigger_batch() -> None:
    hub = EventHub(encode, batch_bytes=100)
    sub = hub.subscribe(frozenset(), None, Agents())
    drain(sub)
    publish_rows(hub, "a1", range(1, 4))
    hub.publish(row("a" * 200, 4))
    publish_rows(hub, "a1", range(5, 7))
    sent: list[bytes] = []
    while (batch := poll(sub)) is not None:
        sent.append(batch)
    assert [len(unframe(batch)) for batch in sent] == [3, 1, 2]
    assert len(sent[1]) > 100 and all(len(batch) <= 100 for batch in (sent[0], sent[2]))


async def test_end_all_ends_every_stream_with_its_resume_point_after_what_it_was_given() -> None:
    hub = EventHub(encode, buffer_events=3)
    live = hub.subscribe(frozenset(), None, Agents("a1"))
    lagging = hub.subscribe(frozenset(), None, Agents("a1"))
    live_items = drain(live)
    for seq in range(1, 6):
        hub.publish(row("a1", seq))
        live_items += drain(live)
    hub.end_all("draining")
    assert live_items[-1] == "5:row a1 5"
    assert drain(live) == ["0:ending 5"]
    # Demoted at its 4th event with none taken: its buffer was dropped, so it resumes at 0.
    assert drain(lagging) == ["0:upsert a1", "0:synced 0", "0:ending 0"]
    assert [s async for s in live] == []
    assert hub.subscriptions == ()
    with pytest.raises(ShuttingDown):
        hub.subscribe(frozenset(), None, Agents())


async def test_resuming_from_a_stream_ending_replays_exactly_the_rest() -> None:
    history = [row("a1" if seq % 2 else "a2", seq) for seq in range(1, 31)]
    hub = EventHub(encode, buffer_events=4)
    sub = hub.subscribe(frozenset({"a1"}), None, Agents("a1"))
    for event in history[:20]:
        hub.publish(event)
    hub.end_all("draining")
    before = drain(sub)
    resume = int(before[-1].removeprefix("0:ending "))
    # A restarted server with the same history (and more) serves the resume.
    restarted = EventHub(encode)
    for event in history:
        restarted.publish(event)
    after = drain(restarted.subscribe(frozenset({"a1"}), resume, Agents("a1")))
    events = [item for item in before[:-1] + after if not item.startswith("0:")]
    assert events == [f"{seq}:row a1 {seq}" for seq in range(1, 31, 2)]
    assert after[-1] == "0:synced 30"


async def test_close_wakes_a_waiting_reader_and_leaves_the_hub() -> None:
    hub = EventHub(encode)
    sub = hub.subscribe(frozenset({"a1"}), None, Agents())
    drain(sub)
    reader = asyncio.create_task(anext(sub, None))
    await asyncio.sleep(0)
    sub.close()
    assert await asyncio.wait_for(reader, 5) is None
    assert sub.closed
    assert not hub.subscriptions
    publish_rows(hub, "a1", [1])
    assert sub.buffered_events == 0


async def test_a_subscription_closes_when_its_context_exits() -> None:
    hub = EventHub(encode)
    async with hub.subscribe(frozenset(), None, Agents()) as sub:
        assert hub.subscriptions == (sub,)
    assert sub.closed
    assert not hub.subscriptions


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 2_097_152])
def test_frame_prefixes_the_repeated_field_tag_and_varint_length(size: int) -> None:
    payload = b"x" * size
    framed = frame(payload)
    assert framed.endswith(payload)
    header = framed[: len(framed) - size]
    assert header[0] == 0x0A
    length = sum((b & 0x7F) << (7 * i) for i, b in enumerate(header[1:]))
    assert length == size
    assert all(b & 0x80 for b in header[1:-1]) and not header[-1] & 0x80


# --- the invariant, under any interleaving ------------------------------------------------

SCOPES: tuple[frozenset[str], ...] = (frozenset(), frozenset({"a1"}), frozenset({"a2", "a3"}))


def check_stream(items: list[str], scope: frozenset[str], published: list[str]) -> None:
    """After each Synced(R) a stream carries exactly the scope's events after R, in order,
    until a reset starts a new snapshot; a StreamEnding's resume point covers all it sent."""
    matching = [rev for rev, agent_id in enumerate(published, 1) if not scope or agent_id in scope]
    cursor: int | None = None
    for item in items:
        revision_text, _, text = item.partition(":")
        revision = int(revision_text)
        if text.startswith("synced"):
            cursor = int(text.split()[1])
        elif text.startswith("reset"):
            cursor = None
        elif text.startswith("ending"):
            assert cursor is not None
            resume = int(text.split()[1])
            assert resume >= cursor
            assert [r for r in matching if cursor < r <= resume] == []
        elif not text.startswith("upsert"):
            assert cursor is not None, f"event {item} outside a synced stretch"
            assert revision == min(r for r in matching if r > cursor), item
            cursor = revision


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("publish"), st.sampled_from(["a1", "a2", "a3"])),
            st.tuples(st.just("read"), st.integers(0, len(SCOPES) - 1)),
        ),
        max_size=120,
    )
)
def test_every_stream_is_gapless_and_ordered_under_any_interleaving(
    ops: list[tuple[str, str | int]],
) -> None:
    hub = EventHub(encode, buffer_events=3, retain_events=12, batch_events=2)
    agents = Agents("a1", "a2", "a3")
    subs = [hub.subscribe(scope, None, agents) for scope in SCOPES]
    received: list[list[str]] = [[] for _ in SCOPES]
    published: list[str] = []
    for op, arg in ops:
        if op == "publish":
            assert isinstance(arg, str)
            hub.publish(row(arg, len(published) + 1))
            published.append(arg)
        else:
            assert isinstance(arg, int)
            if (batch := poll(subs[arg])) is not None:
                received[arg] += unframe(batch)
    hub.end_all("done")
    for index, (sub, scope) in enumerate(zip(subs, SCOPES, strict=True)):
        received[index] += drain(sub)
        assert received[index][-1].startswith("0:ending")
        check_stream(received[index], scope, published)
