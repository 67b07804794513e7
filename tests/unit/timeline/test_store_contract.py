"""The timeline store contract, run against every store (tests/support/stores.py): seqs, epochs,
retention and every fetch receipt (docs/design.md#cursors). Page caps by rows and bytes:
test_store_contract_pages.py."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral_server.domain.timeline import (
    DEFAULT_PAGE_LIMIT,
    Cursor,
    Direction,
    FetchResult,
    TimelineRow,
    TimelineWindow,
    UserMessage,
)
from corral_server.errors import AgentNotFound, InvalidArgument
from corral_server.timeline.store import NewRow, TimelineStore
from tests.support.stores import KINDS, Stores, counting_epochs

AGENT = "agent-1"
EPOCH = "epoch-1"  # the first epoch `counting_epochs` mints


def new_row(n: int) -> NewRow:
    return NewRow(UserMessage(f"m{n}"), timestamp_ms=1000 + n, turn_id=f"t{n}")


async def filled(stores: Stores, count: int, *, retain_rows: int | None = None) -> TimelineStore:
    """A store whose agent has rows 1..count; row n says f"m{n}"."""
    store = await stores.make(retain_rows=retain_rows, epoch_factory=counting_epochs())
    await store.create(AGENT)
    await store.append(AGENT, [new_row(n) for n in range(1, count + 1)])
    return store


def seqs(result: FetchResult) -> list[int]:
    return [row.seq for row in result.rows]


def span(first: int, last: int) -> list[int]:
    return list(range(first, last + 1))


# --- creating and appending -----------------------------------------------------------------


async def test_create_mints_an_epoch_and_starts_at_seq_one(stores: Stores) -> None:
    store = await stores.make(epoch_factory=counting_epochs())
    head = await store.create(AGENT)
    assert (head.epoch, head.next_seq) == (EPOCH, 1)
    assert store.head(AGENT) == head


async def test_default_epochs_are_distinct_uuid_hex_strings(stores: Stores) -> None:
    store = await stores.make()
    first = await store.create("a")
    second = await store.create("b")
    assert len(first.epoch) == 32
    int(first.epoch, 16)
    assert first.epoch != second.epoch


async def test_creating_an_existing_timeline_is_refused(stores: Stores) -> None:
    store = await filled(stores, 3)
    with pytest.raises(ValueError, match="already has a timeline"):
        await store.create(AGENT)
    assert store.head(AGENT).next_seq == 4


async def test_retain_rows_below_one_is_refused(stores: Stores) -> None:
    with pytest.raises(ValueError, match="retain_rows"):
        await stores.make(retain_rows=0)


async def test_appended_rows_get_contiguous_seqs_across_batches(stores: Stores) -> None:
    store = await filled(stores, 0)
    first = await store.append(AGENT, [new_row(1), new_row(2)])
    second = await store.append(AGENT, [new_row(3)])
    assert [r.seq for r in first + second] == [1, 2, 3]
    assert second[0] == TimelineRow(3, 1003, UserMessage("m3"), turn_id="t3")
    assert store.head(AGENT).next_seq == 4


async def test_appending_nothing_changes_nothing(stores: Stores) -> None:
    store = await filled(stores, 2)
    assert await store.append(AGENT, []) == []
    assert store.head(AGENT).next_seq == 3


async def test_agents_have_independent_seqs(stores: Stores) -> None:
    store = await filled(stores, 5)
    await store.create("other")
    appended = await store.append("other", [new_row(1)])
    assert appended[0].seq == 1
    assert store.head(AGENT).next_seq == 6


async def test_unknown_agents_are_reported(stores: Stores) -> None:
    store = await filled(stores, 0)
    with pytest.raises(KeyError):
        store.head("ghost")
    with pytest.raises(AgentNotFound):
        await store.append("ghost", [new_row(1)])
    with pytest.raises(AgentNotFound):
        await store.fetch("ghost", Direction.TAIL, None, None)
    with pytest.raises(AgentNotFound):
        await store.rebase("ghost")
    with pytest.raises(AgentNotFound):
        await store.set_provider_message_id("ghost", 1, "p")


# --- TAIL -------------------------------------------------------------------------------------


async def test_tail_of_an_empty_timeline_is_an_empty_page_with_zero_window(stores: Stores) -> None:
    store = await filled(stores, 0)
    result = await store.fetch(AGENT, Direction.TAIL, None, None)
    assert result == FetchResult(
        epoch=EPOCH,
        window=TimelineWindow(0, 0, 1),
        rows=(),
        has_older=False,
        has_newer=False,
    )
    assert result.start_cursor is None
    assert result.end_cursor is None


async def test_tail_without_limit_returns_the_newest_default_page(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.TAIL, None, None)
    assert seqs(result) == span(500 - DEFAULT_PAGE_LIMIT + 1, 500)
    assert result.rows[0].item == UserMessage(f"m{500 - DEFAULT_PAGE_LIMIT + 1}")
    assert (result.has_older, result.has_newer) == (True, False)
    assert result.window == TimelineWindow(1, 500, 501)
    assert not (result.reset or result.stale_cursor or result.gap)
    assert result.start_cursor == Cursor(EPOCH, 301)
    assert result.end_cursor == Cursor(EPOCH, 500)


async def test_tail_with_explicit_limit_returns_that_many_newest_rows(stores: Stores) -> None:
    store = await filled(stores, 10)
    result = await store.fetch(AGENT, Direction.TAIL, None, 3)
    assert seqs(result) == [8, 9, 10]
    assert result.has_older


async def test_tail_with_limit_zero_returns_the_whole_window(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert seqs(result) == span(1, 500)
    assert (result.has_older, result.has_newer) == (False, False)


async def test_tail_shorter_than_the_limit_has_nothing_older(stores: Stores) -> None:
    store = await filled(stores, 5)
    result = await store.fetch(AGENT, Direction.TAIL, None, 10)
    assert seqs(result) == span(1, 5)
    assert not result.has_older


async def test_tail_with_a_cursor_from_another_epoch_says_stale_cursor_and_reset(
    stores: Stores,
) -> None:
    store = await filled(stores, 5)
    result = await store.fetch(AGENT, Direction.TAIL, Cursor("old", 99), 2)
    assert seqs(result) == [4, 5]
    assert result.reset and result.stale_cursor and not result.gap


async def test_tail_with_a_cursor_of_this_epoch_or_none_is_a_plain_tail(stores: Stores) -> None:
    store = await filled(stores, 5)
    epoch = store.head(AGENT).epoch
    for cursor in (None, Cursor(epoch, 99), Cursor("", 3)):
        result = await store.fetch(AGENT, Direction.TAIL, cursor, 2)
        assert seqs(result) == [4, 5]
        assert not (result.reset or result.stale_cursor), cursor


# --- BEFORE -----------------------------------------------------------------------------------


async def test_before_a_middle_cursor_returns_the_rows_just_older(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 250), None)
    assert seqs(result) == span(50, 249)
    assert (result.has_older, result.has_newer) == (True, True)


async def test_before_near_the_start_returns_the_first_page_with_nothing_older(
    stores: Stores,
) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 3), 10)
    assert seqs(result) == [1, 2]
    assert (result.has_older, result.has_newer) == (False, True)


async def test_before_the_first_row_is_empty_with_only_newer_rows(stores: Stores) -> None:
    store = await filled(stores, 5)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 1), None)
    assert result.rows == ()
    assert (result.has_older, result.has_newer) == (False, True)


async def test_before_next_seq_is_the_newest_page(stores: Stores) -> None:
    store = await filled(stores, 10)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 11), 4)
    assert seqs(result) == [7, 8, 9, 10]
    assert (result.has_older, result.has_newer) == (True, False)


async def test_before_with_limit_zero_returns_every_older_row(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 400), 0)
    assert seqs(result) == span(1, 399)
    assert (result.has_older, result.has_newer) == (False, True)


async def test_before_on_an_empty_timeline_is_empty_with_no_neighbours(stores: Stores) -> None:
    store = await filled(stores, 0)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 1), None)
    assert result.rows == ()
    assert (result.has_older, result.has_newer) == (False, False)


# --- AFTER ------------------------------------------------------------------------------------


async def test_after_a_middle_cursor_returns_the_rows_just_newer(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 10), 5)
    assert seqs(result) == span(11, 15)
    assert (result.has_older, result.has_newer) == (True, True)


async def test_after_without_limit_returns_a_default_page(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 10), None)
    assert seqs(result) == span(11, 10 + DEFAULT_PAGE_LIMIT)


async def test_after_near_the_head_returns_the_last_page_with_nothing_newer(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 498), 5)
    assert seqs(result) == [499, 500]
    assert (result.has_older, result.has_newer) == (True, False)


async def test_after_the_newest_row_is_empty_with_only_older_rows(stores: Stores) -> None:
    store = await filled(stores, 5)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 5), None)
    assert result.rows == ()
    assert (result.has_older, result.has_newer) == (True, False)
    assert not result.reset


async def test_after_seq_zero_reads_from_the_very_start(stores: Stores) -> None:
    store = await filled(stores, 5)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 0), 2)
    assert seqs(result) == [1, 2]
    assert (result.has_older, result.has_newer) == (False, True)


async def test_after_with_limit_zero_returns_every_newer_row(stores: Stores) -> None:
    store = await filled(stores, 500)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 100), 0)
    assert seqs(result) == span(101, 500)
    assert (result.has_older, result.has_newer) == (True, False)


async def test_after_seq_zero_on_an_empty_timeline_is_empty_with_no_neighbours(
    stores: Stores,
) -> None:
    store = await filled(stores, 0)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 0), None)
    assert result.rows == ()
    assert (result.has_older, result.has_newer, result.reset) == (False, False, False)


# --- receipts: stale cursor, gap, bad requests ------------------------------------------------


@pytest.mark.parametrize("direction", [Direction.BEFORE, Direction.AFTER])
async def test_a_cursor_from_another_epoch_resets_to_the_tail(
    direction: Direction, stores: Stores
) -> None:
    store = await filled(stores, 10)
    result = await store.fetch(AGENT, direction, Cursor("epoch-old", 5), 3)
    assert seqs(result) == [8, 9, 10]
    assert (result.stale_cursor, result.reset, result.gap) == (True, True, False)
    assert result.epoch == EPOCH


async def test_a_stale_cursor_is_stale_even_when_its_seq_is_beyond_this_epoch(
    stores: Stores,
) -> None:
    store = await filled(stores, 3)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor("epoch-old", 10_000), None)
    assert result.stale_cursor
    assert seqs(result) == [1, 2, 3]


async def test_after_a_cursor_older_than_retained_history_is_a_gap_with_the_tail(
    stores: Stores,
) -> None:
    store = await filled(stores, 300, retain_rows=100)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 150), 10)
    assert seqs(result) == span(291, 300)
    assert (result.gap, result.reset, result.stale_cursor) == (True, True, False)
    assert result.window == TimelineWindow(201, 300, 301)


async def test_after_a_cursor_two_below_retained_history_is_already_a_gap(stores: Stores) -> None:
    store = await filled(stores, 300, retain_rows=100)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 199), 3)
    assert (result.gap, result.reset) == (True, True)
    assert seqs(result) == [298, 299, 300]


async def test_after_the_row_just_before_retained_history_is_no_gap(stores: Stores) -> None:
    store = await filled(stores, 300, retain_rows=100)
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 200), 3)
    assert seqs(result) == [201, 202, 203]
    assert (result.gap, result.has_older, result.has_newer) == (False, False, True)


async def test_before_a_dropped_row_is_an_empty_page_not_a_gap(stores: Stores) -> None:
    store = await filled(stores, 300, retain_rows=100)
    result = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 150), None)
    assert result.rows == ()
    assert (result.gap, result.reset) == (False, False)
    assert (result.has_older, result.has_newer) == (False, True)


@pytest.mark.parametrize("direction", [Direction.BEFORE, Direction.AFTER])
async def test_before_and_after_require_a_cursor(direction: Direction, stores: Stores) -> None:
    store = await filled(stores, 3)
    with pytest.raises(InvalidArgument) as raised:
        await store.fetch(AGENT, direction, None, None)
    assert raised.value.violations[0].field == "cursor"


@pytest.mark.parametrize(
    ("direction", "seq"),
    [(Direction.BEFORE, 12), (Direction.AFTER, 11), (Direction.AFTER, 50), (Direction.BEFORE, -1)],
)
async def test_a_cursor_seq_from_the_future_or_negative_is_invalid(
    direction: Direction, seq: int, stores: Stores
) -> None:
    store = await filled(stores, 10)
    with pytest.raises(InvalidArgument) as raised:
        await store.fetch(AGENT, direction, Cursor(EPOCH, seq), None)
    assert raised.value.violations[0].field == "cursor.seq"


async def test_a_negative_limit_is_invalid(stores: Stores) -> None:
    store = await filled(stores, 3)
    with pytest.raises(InvalidArgument) as raised:
        await store.fetch(AGENT, Direction.TAIL, None, -1)
    assert raised.value.violations[0].field == "limit"


# --- retention, rebase, reconciliation, drop --------------------------------------------------


async def test_retention_drops_the_oldest_rows_so_min_seq_rises(stores: Stores) -> None:
    store = await filled(stores, 0, retain_rows=3)
    for n in range(1, 6):
        await store.append(AGENT, [new_row(n)])
    result = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert seqs(result) == [3, 4, 5]
    assert [row.item for row in result.rows] == [UserMessage(f"m{n}") for n in (3, 4, 5)]
    assert result.window == TimelineWindow(3, 5, 6)


async def test_retention_applies_per_agent(stores: Stores) -> None:
    store = await filled(stores, 10, retain_rows=5)
    await store.create("other")
    await store.append("other", [new_row(1), new_row(2)])
    other = await store.fetch("other", Direction.TAIL, None, 0)
    assert seqs(other) == [1, 2]


async def test_rebase_mints_a_new_epoch_and_restarts_seqs(stores: Stores) -> None:
    store = await filled(stores, 10)
    head = await store.rebase(AGENT)
    assert (head.epoch, head.next_seq) == ("epoch-2", 1)
    assert store.head(AGENT) == head
    empty = await store.fetch(AGENT, Direction.TAIL, None, None)
    assert (empty.rows, empty.window) == ((), TimelineWindow(0, 0, 1))
    appended = await store.append(AGENT, [new_row(1)])
    assert appended[0].seq == 1


async def test_a_cursor_from_before_a_rebase_is_stale(stores: Stores) -> None:
    store = await filled(stores, 10)
    await store.rebase(AGENT)
    await store.append(AGENT, [new_row(1), new_row(2)])
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 1), None)
    assert (result.stale_cursor, result.reset, result.epoch) == (True, True, "epoch-2")
    assert seqs(result) == [1, 2]


async def test_set_provider_message_id_changes_only_that_field_of_that_row(stores: Stores) -> None:
    store = await filled(stores, 3)
    before = await store.fetch(AGENT, Direction.TAIL, None, 0)
    await store.set_provider_message_id(AGENT, 2, "prov-2")
    after = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert after.rows[1] == TimelineRow(
        2, 1002, UserMessage("m2"), turn_id="t2", provider_message_id="prov-2"
    )
    assert (after.rows[0], after.rows[2]) == (before.rows[0], before.rows[2])
    assert before.rows[1].provider_message_id == ""  # a page already handed out never changes


async def test_set_provider_message_id_on_a_row_no_longer_retained_is_a_no_op(
    stores: Stores,
) -> None:
    store = await filled(stores, 10, retain_rows=5)
    await store.set_provider_message_id(AGENT, 2, "gone")
    await store.set_provider_message_id(AGENT, 11, "future")
    result = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert all(row.provider_message_id == "" for row in result.rows)
    assert seqs(result) == span(6, 10)


async def test_set_provider_message_id_finds_the_row_after_retention_shifted_it(
    stores: Stores,
) -> None:
    store = await filled(stores, 2000, retain_rows=1500)
    await store.set_provider_message_id(AGENT, 1700, "prov")
    result = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 1699), 1)
    assert (result.rows[0].seq, result.rows[0].provider_message_id) == (1700, "prov")


async def test_drop_forgets_the_timeline_and_is_idempotent(stores: Stores) -> None:
    store = await filled(stores, 3)
    await store.drop(AGENT)
    await store.drop(AGENT)
    with pytest.raises(KeyError):
        store.head(AGENT)
    with pytest.raises(AgentNotFound):
        await store.fetch(AGENT, Direction.TAIL, None, None)
    head = await store.create(AGENT)
    assert head.next_seq == 1


# --- property: fetch agrees with a naive list model -------------------------------------------


@dataclass(frozen=True, slots=True)
class _Append:
    count: int


@dataclass(frozen=True, slots=True)
class _Rebase:
    pass


@dataclass(frozen=True, slots=True)
class _Fetch:
    direction: Direction
    previous_epoch: bool  # cursor names the epoch before the current one, if there was one
    anchor: str  # the cursor seq is anchor + delta: "zero", "oldest" retained or "head"
    delta: int
    limit: int | None


_ops = st.one_of(
    st.builds(_Append, st.integers(0, 40)),
    st.just(_Rebase()),
    st.builds(
        _Fetch,
        st.sampled_from(list(Direction)),
        st.booleans(),
        st.sampled_from(["zero", "oldest", "head"]),
        st.integers(-3, 3) | st.integers(-30, 30),
        st.none() | st.integers(0, 25),
    ),
)

_Expected = tuple[list[int], bool, bool, bool]  # page seqs, has_older, has_newer, gap


def _newest(seqs: list[int], count: int) -> list[int]:
    return seqs[max(0, len(seqs) - count) :]


def _model_fetch(
    retained: list[int], next_seq: int, direction: Direction, seq: int, limit: int | None
) -> _Expected | None:
    """What fetch should answer for a cursor of the current epoch (None = invalid request).
    Written by filtering lists, independently of the store's index arithmetic."""
    take = DEFAULT_PAGE_LIMIT if limit is None else (limit or len(retained))
    if direction is Direction.TAIL:
        return _model_tail(retained, take, gap=False)
    newest_allowed = next_seq if direction is Direction.BEFORE else next_seq - 1
    if not 0 <= seq <= newest_allowed:
        return None
    if direction is Direction.BEFORE:
        page = _newest([s for s in retained if s < seq], take)
        low, high = (page[0], page[-1] + 1) if page else (seq, seq)
    else:
        if retained and seq < retained[0] - 1:
            return _model_tail(retained, take, gap=True)
        page = [s for s in retained if s > seq][:take]
        low, high = (page[0], page[-1] + 1) if page else (seq + 1, seq + 1)
    return page, any(s < low for s in retained), any(s >= high for s in retained), False


def _model_tail(retained: list[int], take: int, *, gap: bool) -> _Expected:
    page = _newest(retained, take)
    return page, len(page) < len(retained), False, gap


async def _check_against_model(kind: str, ops: list[object], retain_rows: int | None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        stores = Stores(kind, Path(directory))
        try:
            store = await stores.make(retain_rows=retain_rows, epoch_factory=counting_epochs())
            await _run_model(store, ops, retain_rows)
        finally:
            await stores.close()


async def _run_model(store: TimelineStore, ops: list[object], retain_rows: int | None) -> None:
    await store.create(AGENT)
    epochs = [EPOCH]
    all_seqs: list[int] = []
    for op in ops:
        match op:
            case _Append(count=count):
                start = len(all_seqs) + 1
                await store.append(AGENT, [new_row(n) for n in range(start, start + count)])
                all_seqs.extend(range(start, start + count))
            case _Rebase():
                epochs.append((await store.rebase(AGENT)).epoch)
                all_seqs = []
            case _Fetch() as fetch:
                retained = _newest(all_seqs, retain_rows) if retain_rows else all_seqs
                await _check_fetch(store, epochs, retained, len(all_seqs) + 1, fetch)


async def _check_fetch(
    store: TimelineStore, epochs: list[str], retained: list[int], next_seq: int, op: _Fetch
) -> None:
    anchors = {"zero": 0, "oldest": retained[0] if retained else next_seq, "head": next_seq}
    seq = anchors[op.anchor] + op.delta
    stale = bool(op.previous_epoch and len(epochs) > 1)
    cursor = Cursor(epochs[-2] if stale else epochs[-1], seq)
    expected: _Expected | None
    if stale:
        # Another epoch's seq may be anything, but never negative (TAIL checks no seq).
        negative = seq < 0 and op.direction is not Direction.TAIL
        expected = (
            None if negative else _model_fetch(retained, next_seq, Direction.TAIL, 0, op.limit)
        )
    else:
        expected = _model_fetch(retained, next_seq, op.direction, seq, op.limit)
    if expected is None:
        with pytest.raises(InvalidArgument):
            await store.fetch(AGENT, op.direction, cursor, op.limit)
        return
    result = await store.fetch(AGENT, op.direction, cursor, op.limit)
    page, has_older, has_newer, gap = expected
    assert seqs(result) == page
    assert [row.item for row in result.rows] == [UserMessage(f"m{s}") for s in page]
    assert (result.has_older, result.has_newer, result.gap) == (has_older, has_newer, gap)
    assert (result.stale_cursor, result.reset) == (stale, stale or gap)
    window = (retained[0], retained[-1], next_seq) if retained else (0, 0, next_seq)
    assert result.window == TimelineWindow(*window)
    assert result.epoch == epochs[-1]


# Examples per store: each SQLite example opens a database of its own, so fewer of them.
_MODEL_EXAMPLES = {"memory": 300, "sqlite": 100}


def _model_test(kind: str) -> Callable[..., None]:
    @settings(max_examples=_MODEL_EXAMPLES[kind], deadline=None)
    @given(ops=st.lists(_ops, max_size=30), retain_rows=st.none() | st.integers(1, 30))
    def test(ops: list[object], retain_rows: int | None) -> None:
        asyncio.run(_check_against_model(kind, ops, retain_rows))

    return test


test_fetch_agrees_with_a_naive_list_model_in_memory = _model_test("memory")
test_fetch_agrees_with_a_naive_list_model_in_sqlite = _model_test("sqlite")
assert set(_MODEL_EXAMPLES) == set(KINDS), "every store kind runs the model"


# --- pipelined appends ------------------------------------------------------------------------


async def test_pipelined_appends_take_their_seqs_in_call_order(stores: Stores) -> None:
    store = await filled(stores, 2)
    futures = [store.append_nowait(AGENT, [new_row(n), new_row(n)]) for n in (3, 4, 5)]
    results = [await future for future in futures]
    assert [[row.seq for row in rows] for rows in results] == [[3, 4], [5, 6], [7, 8]]
    assert store.head(AGENT).next_seq == 9
    page = await store.fetch(AGENT, Direction.AFTER, Cursor(EPOCH, 2), 0)
    assert [row.item for row in page.rows] == [UserMessage(f"m{n}") for n in (3, 3, 4, 4, 5, 5)]


async def test_pipelined_appends_from_many_agents_stay_per_agent_contiguous(
    stores: Stores,
) -> None:
    store = await stores.make()
    agents = [f"agent-{i}" for i in range(20)]
    for agent in agents:
        await store.create(agent)
    futures = [store.append_nowait(agent, [new_row(n)]) for n in range(1, 6) for agent in agents]
    await asyncio.gather(*futures)
    for agent in agents:
        page = await store.fetch(agent, Direction.TAIL, None, 0)
        assert seqs(page) == span(1, 5)
        assert [row.item for row in page.rows] == [UserMessage(f"m{n}") for n in span(1, 5)]


async def test_a_pipelined_append_for_an_unknown_agent_fails_at_once(stores: Stores) -> None:
    store = await filled(stores, 0)
    with pytest.raises(AgentNotFound):
        store.append_nowait("ghost", [new_row(1)])
