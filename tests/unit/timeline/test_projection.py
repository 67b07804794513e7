"""The projected view: fold rules, source ranges, and pages that agree with projecting the
whole timeline at once (docs/design.md#projections)."""

from __future__ import annotations

import asyncio
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_server.domain.timeline import (
    MAX_PAGE_BYTES,
    AssistantMessage,
    Cursor,
    Direction,
    OutputRef,
    Reasoning,
    TimelineItem,
    TimelineRow,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.projected_pages import ProjectedPage, fetch_projected
from corral_server.timeline.projection import (
    FOLD_SPAN,
    Projector,
    SeqRange,
    TimelineEntry,
    project,
)
from corral_server.timeline.store import NewRow

AGENT = "a"


def _rows(*items: TimelineItem, turn: str = "t1") -> list[TimelineRow]:
    return [TimelineRow(i + 1, 1000 + i, item, turn) for i, item in enumerate(items)]


def _call(status: ToolCallStatus, call_id: str = "c1", **kw: object) -> ToolCall:
    return ToolCall(call_id, "read", status, **kw)  # type: ignore[arg-type]


def test_a_tool_calls_updates_fold_into_one_entry_at_its_first_row() -> None:
    rows = _rows(
        _call(ToolCallStatus.PENDING, input={"path": "a"}),
        AssistantMessage("while it runs"),
        _call(ToolCallStatus.COMPLETED, output="done"),
    )
    entries = project(rows)
    assert [e.seq for e in entries] == [1, 2]
    call = entries[0]
    assert call.ranges == (SeqRange(1, 1), SeqRange(3, 3))
    assert call.item == ToolCall("c1", "read", ToolCallStatus.COMPLETED, {"path": "a"}, "done")
    assert call.timestamp_ms == 1000 and call.updated_ms == 1002


def test_consecutive_fragments_of_one_message_merge_and_others_do_not() -> None:
    rows = _rows(
        AssistantMessage("Hel", "m1"),
        AssistantMessage("lo", "m1"),
        AssistantMessage("other", "m2"),
        Reasoning("think"),
        Reasoning("ing"),
        UserMessage("next"),
        UserMessage("next"),
    )
    entries = project(rows)
    assert [(e.seq, e.ranges, e.item) for e in entries] == [
        (1, (SeqRange(1, 2),), AssistantMessage("Hello", "m1")),
        (3, (SeqRange(3, 3),), AssistantMessage("other", "m2")),
        (4, (SeqRange(4, 5),), Reasoning("thinking")),
        (6, (SeqRange(6, 6),), UserMessage("next")),
        (7, (SeqRange(7, 7),), UserMessage("next")),
    ]


def test_fragments_of_one_message_in_two_turns_stay_apart() -> None:
    rows = [
        TimelineRow(1, 0, AssistantMessage("a", "m"), "t1"),
        TimelineRow(2, 0, AssistantMessage("b", "m"), "t2"),
    ]
    assert len(project(rows)) == 2


def test_updates_further_apart_than_the_fold_span_are_two_entries() -> None:
    filler = [UserMessage(str(i)) for i in range(FOLD_SPAN)]
    rows = _rows(_call(ToolCallStatus.PENDING), *filler, _call(ToolCallStatus.COMPLETED))
    entries = project(rows)
    assert entries[0].row_count() == 1 and entries[-1].seq == FOLD_SPAN + 2


def test_non_finite_numbers_are_dropped_from_what_is_emitted() -> None:
    value = {"ok": 1.5, "nan": math.nan, "list": [1, math.inf, {"x": -math.inf}]}
    rows = _rows(_call(ToolCallStatus.COMPLETED, input=value, output=math.nan))
    item = project(rows)[0].item
    assert isinstance(item, ToolCall)
    assert item.input == {"ok": 1.5, "list": [1, {}]}
    assert item.output is None


def test_a_calls_output_kept_apart_stays_named_by_its_entry() -> None:
    ref = OutputRef("blob-1", 300_000, True, False)
    nan = float("nan")
    running = ToolCall("c1", "shell", ToolCallStatus.RUNNING, {"cmd": "seq 1 99999", "n": nan})
    done = ToolCall("c1", "", ToolCallStatus.COMPLETED, output="000001\n", output_ref=ref)
    [entry] = project(_rows(running, done))
    assert entry.item == ToolCall(
        "c1", "shell", ToolCallStatus.COMPLETED, {"cmd": "seq 1 99999"}, "000001\n", "", ref
    )


def test_a_live_projector_changes_an_entry_in_place() -> None:
    projector = Projector(keep_all=False)
    rows = _rows(AssistantMessage("a", "m"), AssistantMessage("b", "m"), UserMessage("u"))
    first, second, third = (projector.add(row) for row in rows)
    assert (first.seq, second.seq, third.seq) == (1, 1, 3)
    assert second.item == AssistantMessage("ab", "m") and second.ranges == (SeqRange(1, 2),)


# -- properties: pages partition the rows and agree with projecting everything at once ----

_call_ids = st.sampled_from(["c1", "c2", "c3"])
_items = st.one_of(
    st.builds(AssistantMessage, st.sampled_from(["x", "yy"]), st.sampled_from(["m1", "m2"])),
    st.builds(Reasoning, st.just("r")),
    st.builds(UserMessage, st.just("u")),
    st.builds(
        ToolCall, _call_ids, st.just("tool"), st.sampled_from(list(ToolCallStatus)), st.none()
    ),
)
_timelines = st.lists(
    st.tuples(_items, st.sampled_from(["t1", "t2"]), st.integers(0, 3)), max_size=160
)


async def _store(spec: list[tuple[TimelineItem, str, int]]) -> InMemoryTimelineStore:
    store = InMemoryTimelineStore()
    await store.create(AGENT)
    rows: list[NewRow] = []
    for item, turn, gap in spec:
        rows.append(NewRow(item, 0, turn))
        # runs of filler rows, so some updates of one call fall beyond the fold span
        rows.extend(NewRow(UserMessage("f"), 0, turn) for _ in range(gap * 9))
    if rows:
        await store.append(AGENT, rows)
    return store


async def _pages(
    store: InMemoryTimelineStore, direction: Direction, limit: int
) -> list[ProjectedPage]:
    async def fetch(d: Direction, c: Cursor | None, n: int | None):  # type: ignore[no-untyped-def]
        return await store.fetch(AGENT, d, c, n)

    start = Cursor(store.head(AGENT).epoch, 0) if direction is Direction.AFTER else None
    pages = [await fetch_projected(fetch, direction, start, limit)]
    while True:
        last = pages[-1]
        if direction is Direction.AFTER and last.receipt.has_newer:
            pages.append(await fetch_projected(fetch, Direction.AFTER, last.end_cursor, limit))
        elif direction is Direction.TAIL and last.receipt.has_older:
            pages.append(await fetch_projected(fetch, Direction.BEFORE, last.start_cursor, limit))
        else:
            return pages


def _covered(entries: list[TimelineEntry]) -> list[int]:
    return sorted(s for e in entries for r in e.ranges for s in range(r.start, r.end + 1))


@settings(max_examples=60, deadline=None)
@given(_timelines, st.integers(1, 7))
def test_paging_forward_or_back_gives_the_entries_of_projecting_all_at_once(
    spec: list[tuple[TimelineItem, str, int]], limit: int
) -> None:
    async def run() -> None:
        store = await _store(spec)
        rows = (
            await store.fetch(AGENT, Direction.AFTER, Cursor(store.head(AGENT).epoch, 0), 0)
        ).rows
        whole = project(rows)
        forward = [e for p in await _pages(store, Direction.AFTER, limit) for e in p.entries]
        backward = [
            e for p in reversed(await _pages(store, Direction.TAIL, limit)) for e in p.entries
        ]
        assert forward == whole
        assert backward == whole
        # the source ranges partition exactly the rows the entries came from: every row once
        assert _covered(forward) == [row.seq for row in rows]

    asyncio.run(run())


@settings(max_examples=60, deadline=None)
@given(_timelines, st.integers(1, 5), st.data())
def test_each_page_holds_whole_entries_with_ranges_of_their_own_rows(
    spec: list[tuple[TimelineItem, str, int]], limit: int, data: st.DataObject
) -> None:
    async def run() -> None:
        store = await _store(spec)
        head = store.head(AGENT)
        rows = (await store.fetch(AGENT, Direction.AFTER, Cursor(head.epoch, 0), 0)).rows
        by_seq = {row.seq: row for row in rows}
        whole = {e.seq: e for e in project(rows)}
        seq = data.draw(st.integers(0, head.next_seq - 1))
        direction = data.draw(st.sampled_from([Direction.BEFORE, Direction.AFTER]))

        async def fetch(d: Direction, c: Cursor | None, n: int | None):  # type: ignore[no-untyped-def]
            return await store.fetch(AGENT, d, c, n)

        page = await fetch_projected(fetch, direction, Cursor(head.epoch, seq), limit)
        seqs = _covered(list(page.entries))
        assert len(seqs) == len(set(seqs)) and all(s in by_seq for s in seqs)
        for entry in page.entries:
            assert whole[entry.seq] == entry
            assert (entry.seq < seq) if direction is Direction.BEFORE else (entry.seq > seq)
        assert len(page.entries) <= limit

    asyncio.run(run())


def test_a_page_that_starts_inside_a_fold_reads_back_far_enough_to_see_it() -> None:
    # 1: call pending, 2: a prompt, 3: the call completed (joins 1), 4..35: one message.
    # A BEFORE page of 2 entries first reads rows 2..35, where row 3 looks like a first row.
    items: list[TimelineItem] = [
        _call(ToolCallStatus.PENDING),
        UserMessage("u"),
        _call(ToolCallStatus.COMPLETED),
    ]
    items += [AssistantMessage("x", "m")] * 32

    async def run() -> ProjectedPage:
        store = InMemoryTimelineStore()
        head = await store.create(AGENT)
        await store.append(AGENT, [NewRow(item, 0, "t1") for item in items])

        async def fetch(d: Direction, c: Cursor | None, n: int | None):  # type: ignore[no-untyped-def]
            return await store.fetch(AGENT, d, c, n)

        return await fetch_projected(fetch, Direction.BEFORE, Cursor(head.epoch, 36), 2)

    page = asyncio.run(run())
    assert [e.seq for e in page.entries] == [2, 4]
    assert page.receipt.has_older and not page.receipt.has_newer


def test_a_long_message_is_cut_at_fixed_seqs_and_a_short_one_never() -> None:
    long_run = project(_rows(*[AssistantMessage("x", "m")] * 600))
    assert [(e.seq, e.last_seq) for e in long_run] == [(1, 255), (256, 511), (512, 600)]
    rows = _rows(*[UserMessage("u")] * 254, *[AssistantMessage("y", "m")] * 3)
    assert project(rows)[-1].ranges == (SeqRange(255, 257),)  # across 256, but short


def test_pages_over_a_long_message_give_the_entries_of_the_whole() -> None:
    items = [UserMessage("u")] * 40 + [AssistantMessage("x", "m")] * 700 + [UserMessage("v")]

    async def run() -> None:
        store = InMemoryTimelineStore()
        head = await store.create(AGENT)
        await store.append(AGENT, [NewRow(item, 0, "t") for item in items])
        rows = (await store.fetch(AGENT, Direction.AFTER, Cursor(head.epoch, 0), 0)).rows
        whole = project(rows)
        forward = [e for p in await _pages(store, Direction.AFTER, 1) for e in p.entries]
        backward = [e for p in reversed(await _pages(store, Direction.TAIL, 1)) for e in p.entries]
        assert forward == whole and backward == whole

    asyncio.run(run())


def test_a_page_of_big_entries_keeps_what_fits_the_byte_budget_and_pages_on() -> None:
    # Twelve messages of 400 KB: about 4.8 MB, more than two pages' budget.
    async def run() -> None:
        store = InMemoryTimelineStore()
        await store.create(AGENT)
        texts = [chr(ord("a") + n) * 400_000 for n in range(12)]
        await store.append(
            AGENT, [NewRow(AssistantMessage(t, f"m{n}"), 0) for n, t in enumerate(texts)]
        )
        pages = await _pages(store, Direction.TAIL, 0)
        assert len(pages) >= 3
        for page in pages:
            assert page.entries
            held = sum(len(_text(e)) for e in page.entries)
            assert len(page.entries) == 1 or held <= MAX_PAGE_BYTES
        got = [_text(e) for p in reversed(pages) for e in p.entries]
        assert got == texts

    asyncio.run(run())


def _text(entry: TimelineEntry) -> str:
    assert isinstance(entry.item, AssistantMessage)
    return entry.item.text
