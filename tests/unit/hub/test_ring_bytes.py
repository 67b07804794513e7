"""The ring is bounded in bytes as well as in events: whichever bound is hit first evicts the
oldest events, the newest always stays, and the earliest resumable revision moves with it
(a resume point that left answers with an explicit reset, never a silent skip)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_server.hub import EventHub
from corral_server.hub.ring import Entry, Ring, frame_with_revision, reframe
from tests.unit.hub.test_event_hub import Agents, drain, encode, publish_rows, rows


def entry(revision: int, size: int) -> Entry:
    return (revision, "a1", b"x" * size)


def test_the_byte_budget_evicts_the_oldest_events_and_moves_the_earliest_point() -> None:
    ring = Ring(100, max_bytes=30)
    for revision in range(1, 4):
        ring.append(entry(revision, 10))
    assert (ring.earliest_resumable, ring.size_bytes) == (0, 30)
    ring.append(entry(4, 10))
    assert (ring.earliest_resumable, ring.size_bytes) == (1, 30)
    ring.append(entry(5, 15))  # 45 bytes: 2 and 3 go
    assert (ring.earliest_resumable, ring.size_bytes) == (3, 25)
    assert [e[0] for e in ring.span(ring.earliest_resumable, ring.head)] == [4, 5]


def test_an_event_larger_than_the_budget_stays_alone_as_the_newest() -> None:
    ring = Ring(100, max_bytes=30)
    ring.append(entry(1, 10))
    ring.append(entry(2, 50))
    assert ring.earliest_resumable == 1 and ring.size_bytes == 50
    assert ring.span(1, 2) == [entry(2, 50)]
    ring.append(entry(3, 5))
    assert ring.earliest_resumable == 2 and ring.size_bytes == 5


def test_the_event_bound_still_applies_under_the_byte_budget() -> None:
    ring = Ring(3, max_bytes=1_000)
    for revision in range(1, 6):
        ring.append(entry(revision, 10))
    assert ring.earliest_resumable == 2 and ring.size_bytes == 30


def test_a_byte_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        Ring(10, max_bytes=0)


@given(
    st.integers(1, 8),
    st.integers(1, 60),
    st.lists(st.integers(0, 40), min_size=1, max_size=40),
)
def test_the_ring_holds_exactly_the_newest_events_that_fit_both_bounds(
    capacity: int, max_bytes: int, sizes: list[int]
) -> None:
    ring = Ring(capacity, max_bytes)
    for revision, size in enumerate(sizes, 1):
        ring.append(entry(revision, size))
    # The model: walk back from the newest while both bounds hold (the newest always stays).
    kept, total = 0, 0
    for size in reversed(sizes):
        if kept and (kept == capacity or total + size > max_bytes):
            break
        kept, total = kept + 1, total + size
    assert ring.head == len(sizes)
    assert ring.earliest_resumable == len(sizes) - kept
    assert ring.size_bytes == total
    held = ring.span(ring.earliest_resumable, ring.head)
    assert [e[0] for e in held] == list(range(len(sizes) - kept + 1, len(sizes) + 1))


async def test_a_resume_point_evicted_by_bytes_gets_an_explicit_reset() -> None:
    # Each "row a1 N" frame (N < 10) is 12 bytes: 48 bytes keep the last 4 of 9.
    hub = EventHub(encode, retain_events=100, retain_bytes=48)
    publish_rows(hub, "a1", range(1, 10))
    assert hub.earliest_resumable_revision == 5
    kept = hub.subscribe(frozenset(), 5, Agents("a1"))
    assert drain(kept) == [*rows("a1", range(6, 10), 6), "0:synced 9"]
    gone = hub.subscribe(frozenset(), 4, Agents("a1"))
    assert drain(gone) == ["0:reset 4 5", "0:upsert a1", "0:synced 9 reset"]


@pytest.mark.parametrize("size", [0, 1, 127, 128, 4_000, 5_000, 70_000])
@pytest.mark.parametrize(("old", "new"), [(1, 2), (5, 300_000), (2_500_000, 7), (16_383, 16_384)])
def test_reframe_gives_the_frame_of_the_same_event_under_another_revision(
    size: int, old: int, new: int
) -> None:
    body = b"\x22" + bytes([size % 128]) + b"b" * size  # any bytes after the revision field
    assert reframe(frame_with_revision(old, body), new) == frame_with_revision(new, body)
