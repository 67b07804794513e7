"""`Ring.extend` (a durable commit's events retained at once) leaves the ring exactly as one
`append` per event would: the same events, bounds and byte count, whatever the batch sizes,
the wrap-around and the eviction by count or by bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral_server.hub.ring import Entry, Ring


def state(ring: Ring) -> tuple[int, int, int, list[Entry]]:
    return ring.first, ring.head, ring.size_bytes, ring.span(ring.earliest_resumable, ring.head)


@given(
    capacity=st.integers(1, 12),
    max_bytes=st.none() | st.integers(1, 60),
    start=st.integers(0, 30),
    batches=st.lists(st.lists(st.integers(0, 9), max_size=15), max_size=8),
)
def test_extend_leaves_the_ring_as_appends_would(
    capacity: int, max_bytes: int | None, start: int, batches: list[list[int]]
) -> None:
    one_by_one, extended = Ring(capacity, max_bytes, start), Ring(capacity, max_bytes, start)
    revision = start
    for sizes in batches:
        batch: list[Entry] = []
        for size in sizes:
            revision += 1
            batch.append((revision, f"a{revision % 3}", bytes(size)))
        for entry in batch:
            one_by_one.append(entry)
        extended.extend(batch)
        assert state(extended) == state(one_by_one)
        assert extended._slots == one_by_one._slots  # the others hold the placeholder
