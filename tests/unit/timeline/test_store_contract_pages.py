"""The store contract, page caps: pages are cut by rows and bytes as well as by `limit`, and
their receipts say so. Run against every store (tests/support/stores.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral_server.domain.timeline import (
    MAX_PAGE_BYTES,
    MAX_PAGE_ROWS,
    MAX_ROW_BYTES,
    AssistantMessage,
    Cursor,
    Direction,
    FetchResult,
)
from corral_server.timeline.size import row_bytes
from corral_server.timeline.store import NewRow, TimelineStore
from tests.support.stores import Stores

AGENT = "agent-1"


async def store_of(stores: Stores, sizes: list[int], **limits: int) -> TimelineStore:
    """A store whose row n (1-based) holds sizes[n-1] characters of ASCII text."""
    store = await stores.make(**limits)
    await store.create(AGENT)
    await store.append(AGENT, [NewRow(AssistantMessage("x" * n), 0) for n in sizes])
    return store


def seqs(page: FetchResult) -> list[int]:
    return [row.seq for row in page.rows]


def page_bytes(page: FetchResult) -> int:
    return sum(row_bytes(row) for row in page.rows)


def test_a_page_of_rows_or_of_one_big_row_fits_a_default_client_with_room() -> None:
    # A page is the budget or one row alone, never both; the receipt's fields are small.
    assert max(MAX_ROW_BYTES, MAX_PAGE_BYTES) <= 3 * 1024 * 1024
    assert MAX_PAGE_ROWS >= 1_000


async def test_limit_zero_over_rows_bigger_than_the_budget_answers_the_newest_that_fit(
    stores: Stores,
) -> None:
    store = await store_of(stores, [400] * 10, max_page_bytes=1_000)
    page = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert seqs(page) == [9, 10]
    assert page.has_older and not page.has_newer
    assert (page.window.min_seq, page.window.max_seq) == (1, 10)
    assert page.start_cursor == Cursor(page.epoch, 9)


async def test_a_single_row_bigger_than_the_budget_comes_alone(stores: Stores) -> None:
    store = await store_of(stores, [10, 5_000, 10], max_page_bytes=1_000)
    before = await store.fetch(AGENT, Direction.BEFORE, Cursor(_epoch(store), 3), 0)
    assert seqs(before) == [2]
    assert before.has_older and before.has_newer
    after = await store.fetch(AGENT, Direction.AFTER, Cursor(_epoch(store), 1), None)
    assert seqs(after) == [2]
    assert after.has_older and after.has_newer


async def test_after_keeps_the_oldest_rows_that_fit_and_says_newer_ones_exist(
    stores: Stores,
) -> None:
    store = await store_of(stores, [400] * 10, max_page_bytes=1_000)
    page = await store.fetch(AGENT, Direction.AFTER, Cursor(_epoch(store), 0), 0)
    assert seqs(page) == [1, 2]
    assert page.has_newer and not page.has_older


async def test_a_page_holds_at_most_max_page_rows_whatever_its_limit(stores: Stores) -> None:
    store = await store_of(stores, [1] * 50, max_page_rows=20)
    tail = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert seqs(tail) == list(range(31, 51)) and tail.has_older
    after = await store.fetch(AGENT, Direction.AFTER, Cursor(_epoch(store), 0), 40)
    assert seqs(after) == list(range(1, 21)) and after.has_newer


async def test_limit_zero_over_a_long_timeline_reads_only_one_page(stores: Stores) -> None:
    store = await store_of(stores, [1_000] * 20_000)  # ~20 MB of rows: ten pages' budget
    page = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert 0 < page_bytes(page) <= MAX_PAGE_BYTES
    assert seqs(page)[-1] == 20_000 and page.has_older


# One store per example, closed at its end: the fixture only lends the factory.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 3_000), min_size=1, max_size=40),
    budget=st.integers(1, 4_000),
    limit=st.integers(0, 7),
    backwards=st.booleans(),
)
async def test_paging_on_by_the_receipts_yields_every_row_once_within_the_budget(
    sizes: list[int], budget: int, limit: int, backwards: bool, stores: Stores
) -> None:
    try:
        await _page_on(stores, sizes, budget, limit, backwards)
    finally:
        await stores.close()


async def _page_on(
    stores: Stores, sizes: list[int], budget: int, limit: int, backwards: bool
) -> None:
    store = await store_of(stores, sizes, max_page_bytes=budget)
    epoch = _epoch(store)
    if backwards:
        page = await store.fetch(AGENT, Direction.TAIL, None, limit)
        seen = seqs(page)
        while page.has_older:
            assert page.start_cursor is not None
            page = await store.fetch(AGENT, Direction.BEFORE, page.start_cursor, limit)
            _fits(page, budget)
            seen = seqs(page) + seen
    else:
        page = await store.fetch(AGENT, Direction.AFTER, Cursor(epoch, 0), limit)
        seen = seqs(page)
        while page.has_newer:
            assert page.end_cursor is not None
            page = await store.fetch(AGENT, Direction.AFTER, page.end_cursor, limit)
            _fits(page, budget)
            seen += seqs(page)
    assert seen == list(range(1, len(sizes) + 1))


def _fits(page: FetchResult, budget: int) -> None:
    assert page.rows, "a page that says more rows exist must make progress"
    assert len(page.rows) == 1 or page_bytes(page) <= budget
    assert page.size is None or page.size == page_bytes(page)


async def test_a_page_says_what_its_rows_weigh(stores: Stores) -> None:
    # Projected pages trust it to skip measuring entries (timeline/projected_pages.py).
    store = await store_of(stores, [10, 300, 7_000, 1])
    for direction, cursor in [
        (Direction.TAIL, None),
        (Direction.BEFORE, Cursor(_epoch(store), 4)),
        (Direction.AFTER, Cursor(_epoch(store), 1)),
    ]:
        page = await store.fetch(AGENT, direction, cursor, 0)
        assert page.rows and page.size == page_bytes(page)


def _epoch(store: TimelineStore) -> str:
    return store.head(AGENT).epoch


@pytest.mark.parametrize("limits", [{"max_page_bytes": 0}, {"max_page_rows": 0}])
async def test_page_limits_below_one_are_a_configuration_error(
    limits: dict[str, int], stores: Stores
) -> None:
    with pytest.raises(ValueError):
        await stores.make(**limits)
