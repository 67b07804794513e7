"""Catch-up steps over spans of the log (hub/span_batches.py) cut exactly the batch that the
same step over the log's entries one by one cuts (the ring's way: catch_up._matching, then
ring.take_batch): the same frames, the same last event, the same position after it."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_server.hub.catch_up import _matching
from corral_server.hub.ring import Entry, frame, frame_ends, take_batch
from corral_server.hub.span_batches import Taken, drop_through, take_spans
from corral_server.records import LogEntry, LogSpan, spans_of

AGENTS = ("a", "b", "c")


def entries_of(events: list[tuple[int, int]], first: int = 1) -> list[LogEntry]:
    """(agent index, payload size) per event, as log entries with real frames."""
    return [
        LogEntry(first + n, AGENTS[agent], frame(bytes([n % 251]) * size))
        for n, (agent, size) in enumerate(events)
    ]


def by_entries(
    entries: list[Entry],
    position: int,
    scan_end: int,
    scope: frozenset[str],
    limits: tuple[int, int],
) -> Taken:
    """The step over entries, as catch_up.py takes it from the ring."""
    max_events, max_bytes = limits
    scan = [entry for entry in entries if position < entry[0] <= scan_end]
    upto = scan[-1][0] if scan else position
    if scope:
        scan, upto = _matching(scan, scope, max_events, upto)
    batch, data = take_batch(scan, max_events, max_bytes)
    last = batch[-1][0] if batch else 0
    return Taken(data, last, upto if len(batch) == len(scan) else last)


events_st = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from([1, 5, 60, 127, 130, 300])),
    min_size=1,
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(
    events=events_st,
    span_events=st.integers(1, 9),
    cut=st.integers(0, 40),
    extra=st.integers(0, 45),
    scope=st.frozensets(st.sampled_from(AGENTS)),
    max_events=st.integers(1, 12),
    max_bytes=st.integers(1, 1500),
)
def test_a_step_over_spans_is_the_step_over_entries(
    events: list[tuple[int, int]],
    span_events: int,
    cut: int,
    extra: int,
    scope: frozenset[str],
    max_events: int,
    max_bytes: int,
) -> None:
    entries = entries_of(events)
    position = min(cut, len(entries) - 1)
    spans = spans_of(entries, span_events)
    drop_through(spans, position)
    scan_end = position + extra
    taken = take_spans(spans, position, scan_end, scope, max_events, max_bytes)
    expected = by_entries(list(entries), position, scan_end, scope, (max_events, max_bytes))
    assert taken == expected


@settings(max_examples=200, deadline=None)
@given(events=events_st, span_events=st.integers(1, 9), cut=st.integers(0, 45))
def test_dropping_through_a_position_keeps_exactly_what_follows(
    events: list[tuple[int, int]], span_events: int, cut: int
) -> None:
    entries = entries_of(events, first=7)
    spans = spans_of(entries, span_events)
    drop_through(spans, 6 + cut)
    rest = [entry for entry in entries if entry.revision > 6 + cut]
    assert b"".join(span.frames for span in spans) == b"".join(entry.event for entry in rest)
    agents = [a for span in spans for a in _agents(span)]
    assert agents == [entry.agent_id for entry in rest]
    assert [span.first for span in spans[:1]] == [entry.revision for entry in rest[:1]]
    for before, after in pairwise(spans):
        assert after.first == before.first + before.events


def _agents(span: LogSpan) -> list[str]:
    agents = span.agents
    return [agents] * span.events if isinstance(agents, str) else list(agents)


def test_spans_are_cut_where_their_first_revision_follows_a_multiple() -> None:
    entries = entries_of([(0, 3)] * 5 + [(1, 3)] * 6, first=3)  # revisions 3..13
    spans = spans_of(entries, 4)
    assert [(s.first, s.events, s.agents) for s in spans] == [
        (3, 2, "a"),
        (5, 4, ("a", "a", "a", "b")),
        (9, 4, "b"),
        (13, 1, "b"),
    ]


def test_frame_ends_reads_every_length_form() -> None:
    payloads = [b"x", b"y" * 127, b"z" * 128, b"w" * 20_000]
    frames = [frame(payload) for payload in payloads]
    joined = b"".join(frames)
    ends = frame_ends(joined)
    assert [joined[start:end] for start, end in zip([0, *ends], ends, strict=False)] == frames
