"""The in-memory timeline store: rows, seqs and epochs of every agent, held in lists.

Owns seq and epoch minting for the in-memory backend and the fetch receipts
(docs/design.md#cursors). It does no I/O and must not import protobuf or grpc.

Seeking never scans: seqs are contiguous within an epoch, so the list index of a seq is
arithmetic, and a page costs one slice of `limit` rows whether the timeline holds 1 k or 1 M.

Pages are cut by rows and bytes too: a page holds at most `max_page_rows` rows and
`max_page_bytes` of them (their encoded size, estimated by timeline/size.py), and always at
least one row, whatever its `limit` (0 included). A page that walks back (TAIL, BEFORE) keeps
the newest rows of its range, one that walks forward (AFTER) the oldest, and the receipt says
what was left out (has_older / has_newer), so a client just pages on. Only the rows a page
keeps are measured (sizes are not kept: that would cost the single writer on every row), so
`limit: 0` over 80 MB costs one page.

Page positions. Every page is a half-open seq interval [lo, hi) clipped to the retained range
[first, next_seq) (`first` is the oldest retained seq, or next_seq when empty), so a page may be
empty and still have a position. has_older = retained rows exist below lo; has_newer = retained
rows exist at or above hi. Consequences worth knowing:
  * TAIL never has_newer.
  * AFTER the newest row: no rows, has_older when any row exists, has_newer false.
  * BEFORE a cursor at or below the oldest retained row: no rows, has_older false, has_newer
    true (BEFORE is never a gap: the client already holds everything newer than its cursor).
  * An empty timeline: no rows, neither flag.

Cursor seqs. BEFORE accepts seq 0..next_seq (next_seq = "before the head"); AFTER accepts
0..next_seq-1 (0 = "from the very start", next_seq-1 = "after the newest row"). An AFTER cursor
at next_seq or beyond would name a row that does not exist yet, and honouring it would silently
skip that row when it arrives, so it is rejected like any other cursor from the future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, assert_never

from corral_server.domain.timeline import (
    DEFAULT_PAGE_LIMIT,
    MAX_PAGE_BYTES,
    MAX_PAGE_ROWS,
    Cursor,
    Direction,
    FetchResult,
    TimelineHead,
    TimelineRow,
    TimelineWindow,
)
from corral_server.errors import AgentNotFound, InvalidArgument
from corral_server.timeline.size import row_bytes
from corral_server.timeline.store import NewRow, check_options, new_epoch

if TYPE_CHECKING:
    from corral_server.timeline.store import TimelineStore

# Compact a timeline's list only once this many dropped rows sit in front of it, and only when
# they are at least half the list: each compaction then moves no more rows than were dropped
# since the last one, so dropping is amortised O(1) per row.
_COMPACT_MIN_DEAD = 1024


class _Timeline:
    """One agent's rows. Invariant: rows[start:] are the retained rows, and their seqs are
    next_seq - len(rows) + start, ..., next_seq - 1 (contiguous, ascending)."""

    __slots__ = ("epoch", "next_seq", "rows", "start")

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.next_seq = 1
        self.rows: list[TimelineRow] = []
        # rows[:start] were dropped by retention and wait for compaction.
        self.start = 0

    @property
    def first(self) -> int:
        """The oldest retained seq; next_seq when nothing is retained."""
        return self.next_seq - (len(self.rows) - self.start)

    def index(self, seq: int) -> int:
        """The list index of a retained seq (or of the slot one past the newest)."""
        return seq - self.first + self.start

    def window(self) -> TimelineWindow:
        if len(self.rows) == self.start:
            return TimelineWindow(0, 0, self.next_seq)
        return TimelineWindow(self.first, self.next_seq - 1, self.next_seq)

    def retain(self, limit: int) -> None:
        excess = len(self.rows) - self.start - limit
        if excess <= 0:
            return
        self.start += excess
        if self.start >= _COMPACT_MIN_DEAD and self.start * 2 >= len(self.rows):
            del self.rows[: self.start]
            self.start = 0


class InMemoryTimelineStore:
    """A `TimelineStore` in memory. `retain_rows` caps the rows kept per agent (oldest dropped
    first, so min_seq rises); None keeps everything. `epoch_factory` mints epochs (uuid4 hex).
    `max_page_rows` and `max_page_bytes` cap a page, whatever its `limit` (one row always
    fits)."""

    def __init__(
        self,
        *,
        retain_rows: int | None = None,
        epoch_factory: Callable[[], str] = new_epoch,
        max_page_rows: int = MAX_PAGE_ROWS,
        max_page_bytes: int = MAX_PAGE_BYTES,
    ) -> None:
        check_options(retain_rows, max_page_rows, max_page_bytes)
        self._retain_rows = retain_rows
        self._max_page_rows = max_page_rows
        self._max_page_bytes = max_page_bytes
        self._epoch_factory = epoch_factory
        self._timelines: dict[str, _Timeline] = {}

    async def create(self, agent_id: str) -> TimelineHead:
        """Create an empty timeline. Creating one that exists is a caller bug (ValueError):
        silently replacing it would renumber rows clients already hold."""
        if agent_id in self._timelines:
            raise ValueError(f"agent {agent_id!r} already has a timeline")
        timeline = _Timeline(self._epoch_factory())
        self._timelines[agent_id] = timeline
        return TimelineHead(timeline.epoch, timeline.next_seq)

    async def append(self, agent_id: str, rows: Sequence[NewRow]) -> list[TimelineRow]:
        return self._append(agent_id, rows)

    def _append(self, agent_id: str, rows: Sequence[NewRow]) -> list[TimelineRow]:
        timeline = self._get(agent_id)
        seq = timeline.next_seq
        appended = [
            TimelineRow(seq + i, row.timestamp_ms, row.item, row.turn_id, row.provider_message_id)
            for i, row in enumerate(rows)
        ]
        timeline.rows.extend(appended)
        timeline.next_seq = seq + len(appended)
        if self._retain_rows is not None:
            timeline.retain(self._retain_rows)
        return appended

    def append_nowait(
        self, agent_id: str, rows: Sequence[NewRow]
    ) -> asyncio.Future[list[TimelineRow]]:
        """Appends at once (memory needs no commit) and returns a completed future."""
        future: asyncio.Future[list[TimelineRow]] = asyncio.get_running_loop().create_future()
        future.set_result(self._append(agent_id, rows))
        return future

    async def fetch(
        self,
        agent_id: str,
        direction: Direction,
        cursor: Cursor | None,
        limit: int | None,
    ) -> FetchResult:
        timeline = self._get(agent_id)
        if limit is None:
            limit = DEFAULT_PAGE_LIMIT
        elif limit < 0:
            raise InvalidArgument.field("limit", f"must be 0 (whole window) or more, got {limit}")
        page = _Page(timeline, self._max_page_rows, self._max_page_bytes)
        match direction:
            case Direction.TAIL:
                # A cursor from another epoch: the client's cursors are stale (a TAIL says so too).
                stale = cursor is not None and bool(cursor.epoch) and cursor.epoch != timeline.epoch
                return _tail(page, limit, stale=stale)
            case Direction.BEFORE:
                return _before(page, _checked(cursor, direction), limit)
            case Direction.AFTER:
                return _after(page, _checked(cursor, direction), limit)
            case _:
                assert_never(direction)

    def head(self, agent_id: str) -> TimelineHead:
        timeline = self._timelines[agent_id]
        return TimelineHead(timeline.epoch, timeline.next_seq)

    async def rebase(self, agent_id: str) -> TimelineHead:
        self._get(agent_id)
        fresh = _Timeline(self._epoch_factory())
        self._timelines[agent_id] = fresh
        return TimelineHead(fresh.epoch, fresh.next_seq)

    async def set_provider_message_id(
        self, agent_id: str, seq: int, provider_message_id: str
    ) -> None:
        """Fill in one row's provider_message_id. A seq outside the retained window is a no-op:
        the row was dropped by retention or rebase, so there is nothing left to reconcile."""
        timeline = self._get(agent_id)
        if not timeline.first <= seq < timeline.next_seq:
            return
        index = timeline.index(seq)
        timeline.rows[index] = timeline.rows[index]._replace(
            provider_message_id=provider_message_id
        )

    async def drop(self, agent_id: str) -> None:
        """Forget the timeline; dropping an unknown agent is a no-op (drop is idempotent)."""
        self._timelines.pop(agent_id, None)

    def _get(self, agent_id: str) -> _Timeline:
        try:
            return self._timelines[agent_id]
        except KeyError:
            raise AgentNotFound(agent_id) from None


def _checked(cursor: Cursor | None, direction: Direction) -> Cursor:
    if cursor is None:
        raise InvalidArgument.field("cursor", f"required for direction {direction.value.upper()}")
    if cursor.seq < 0:
        raise InvalidArgument.field("cursor.seq", f"must not be negative, got {cursor.seq}")
    return cursor


class _Page(NamedTuple):
    """What a fetch reads from: the timeline, and the most rows and bytes a page may hold."""

    timeline: _Timeline
    max_rows: int
    max_bytes: int


def _tail(page: _Page, limit: int, *, stale: bool = False, gap: bool = False) -> FetchResult:
    timeline = page.timeline
    hi = timeline.next_seq
    lo = timeline.first if limit == 0 else max(timeline.first, hi - limit)
    return _cut(page, lo, hi, newest=True, reset=stale or gap, stale_cursor=stale, gap=gap)


def _before(page: _Page, cursor: Cursor, limit: int) -> FetchResult:
    timeline = page.timeline
    if cursor.epoch != timeline.epoch:
        return _tail(page, limit, stale=True)
    first, next_seq = timeline.first, timeline.next_seq
    if cursor.seq > next_seq:
        raise _future_cursor(cursor, next_seq)
    # Never a gap: the client holds everything from the cursor on; older rows are just gone.
    hi = max(first, cursor.seq)
    lo = first if limit == 0 else max(first, hi - limit)
    return _cut(page, lo, hi, newest=True)


def _after(page: _Page, cursor: Cursor, limit: int) -> FetchResult:
    timeline = page.timeline
    if cursor.epoch != timeline.epoch:
        return _tail(page, limit, stale=True)
    first, next_seq = timeline.first, timeline.next_seq
    if cursor.seq >= next_seq:
        raise _future_cursor(cursor, next_seq - 1)
    lo = cursor.seq + 1
    if lo < first:
        # Rows the client never saw (lo .. first-1) are gone: it must start again.
        return _tail(page, limit, gap=True)
    hi = next_seq if limit == 0 else min(next_seq, lo + limit)
    return _cut(page, lo, hi, newest=False)


def _future_cursor(cursor: Cursor, newest_allowed: int) -> InvalidArgument:
    return InvalidArgument.field(
        "cursor.seq",
        f"seq {cursor.seq} is beyond this epoch's timeline (at most {newest_allowed} here)",
    )


def _cut(
    page: _Page,
    lo: int,
    hi: int,
    *,
    newest: bool,
    reset: bool = False,
    stale_cursor: bool = False,
    gap: bool = False,
) -> FetchResult:
    """The rows with seqs lo..hi-1, cut to the page's rows and bytes: the newest rows that fit
    when `newest`, else the oldest; always one row at least. Measures only the rows it keeps
    (and one more). The caller guarantees first <= lo <= hi <= next_seq."""
    timeline = page.timeline
    rows = timeline.rows
    i, j = timeline.index(lo), timeline.index(hi)
    if j - i > page.max_rows:
        i, j = (j - page.max_rows, j) if newest else (i, i + page.max_rows)
    budget = page.max_bytes
    if sum(map(row_bytes, rows[i:j])) <= budget:
        pass  # the common case, measured in one C loop
    elif newest:
        k = j
        while k > i:
            budget -= row_bytes(rows[k - 1])
            if budget < 0 and k < j:
                break
            k -= 1
        i = k
    else:
        k = i
        while k < j:
            budget -= row_bytes(rows[k])
            if budget < 0 and k > i:
                break
            k += 1
        j = k
    shift = timeline.first - timeline.start  # seq = list index + shift
    return FetchResult(
        epoch=timeline.epoch,
        window=timeline.window(),
        rows=tuple(rows[i:j]),
        has_older=i + shift > timeline.first,
        has_newer=j + shift < timeline.next_seq,
        reset=reset,
        stale_cursor=stale_cursor,
        gap=gap,
    )


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: InMemoryTimelineStore) -> TimelineStore:
        return store  # mypy proves InMemoryTimelineStore implements TimelineStore
