"""No batch (one SubscribeResponse) exceeds the hub's batch_bytes unless it is a single event
that alone does: on the live path, in catch-up, in a snapshot, and with the Synced that ends a
replay.

The encoder is test_event_hub's kind: a short text after the revision field, so sizes are
easy to count (a frame is a tag byte, a length byte and the text: "upsert a10" is 12 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain.agent import Agent
from corral_server.domain.events import (
    AgentUpserted,
    Event,
    RowAppended,
    StreamControl,
    Synced,
)
from corral_server.domain.timeline import AssistantMessage, TimelineRow
from corral_server.hub import EventHub, Subscription
from corral_server.hub.ring import Entry, frame, revision_field, take_batch
from tests.support.fakes import idle_agent
from tests.support.hub import poll


def encode(revision: int, event: Event | StreamControl) -> bytes:
    match event:
        case AgentUpserted(agent=agent):
            text = f"upsert {agent.id}"
        case RowAppended(agent_id=agent_id, row=row):
            text = f"row {agent_id} {row.seq}"
        case Synced(revision=synced):
            text = f"synced {synced}"
        case _:
            text = type(event).__name__
    return (revision_field(revision) if revision else b"") + text.encode()


def row(seq: int) -> RowAppended:
    return RowAppended("a1", "e1", TimelineRow(seq, 0, AssistantMessage("")))


def batches(sub: Subscription) -> list[bytes]:
    out: list[bytes] = []
    while (batch := poll(sub)) is not None:
        out.append(batch)
    return out


def agents(*ids: str) -> object:
    def snapshot(scope: frozenset[str]) -> Sequence[Agent]:
        return [idle_agent(i) for i in ids]

    return snapshot


def test_a_snapshot_is_cut_before_the_entry_that_would_cross_the_bound() -> None:
    hub = EventHub(encode, batch_bytes=50)
    ids = [f"a{n}" for n in range(10, 20)]
    sub = hub.subscribe(frozenset(), None, agents(*ids))  # type: ignore[arg-type]
    sent = batches(sub)
    # 12-byte upserts, 4 to a batch (48; a fifth would make 60), then the 10-byte Synced.
    assert [len(batch) for batch in sent] == [48, 48, 34]
    expected = b"".join(frame(f"upsert {i}".encode()) for i in ids) + frame(b"synced 0")
    assert b"".join(sent) == expected


def test_the_synced_that_ends_a_replay_waits_for_the_next_batch_when_it_does_not_fit() -> None:
    hub = EventHub(encode, batch_bytes=96)
    for seq in range(1, 9):
        hub.publish(row(seq))  # 8 frames of 12 bytes: exactly 96
    sub = hub.subscribe(frozenset(), 0, agents())  # type: ignore[arg-type]
    sent = batches(sub)
    assert [len(batch) for batch in sent] == [96, 10]
    assert sent[1] == frame(b"synced 8")
    hub.publish(row(9))
    assert batches(sub) == [frame(revision_field(9) + b"row a1 9")]  # then live


@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=60),
    max_bytes=st.integers(1, 600),
    max_events=st.integers(1, 20),
)
def test_take_batch_is_the_longest_prefix_within_both_bounds(
    sizes: list[int], max_bytes: int, max_events: int
) -> None:
    entries: list[Entry] = [(i + 1, "a1", b"x" * size) for i, size in enumerate(sizes)]
    batch, data = take_batch(entries, max_events, max_bytes)
    assert list(batch) == entries[: len(batch)] and data == b"".join(e[2] for e in batch)
    assert 1 <= len(batch) <= max_events
    assert len(data) <= max_bytes or len(batch) == 1
    longer = entries[: len(batch) + 1]
    assert (
        len(longer) == len(batch)
        or len(longer) > max_events
        or (sum(len(e[2]) for e in longer) > max_bytes)
    )
