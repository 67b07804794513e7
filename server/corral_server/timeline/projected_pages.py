"""Pages of the projected view, read through any timeline store's `fetch`
(docs/design.md#projections).

Owns how a projected page is cut and what its receipt says; the fold rules are
timeline/projection.py's. It keeps nothing between calls and must not change a row.

A projected page is a run of whole entries ordered by their first seq (the entry's `seq`):

* TAIL: the newest `limit` entries; BEFORE c: the newest `limit` entries whose seq < c.seq;
  AFTER c: the oldest `limit` entries whose seq > c.seq. `limit` counts entries (unset = 200,
  0 = the window), within the raw page bounds (10,000 entries, 2 MiB, at least one entry).
* An entry is never cut by a page: it belongs to the page holding its first row, with all its
  rows, even those newer than the page's end cursor; the next page AFTER that cursor does not
  repeat them (they are not first rows). So paging in either direction from the receipt's
  cursors gives every entry once, exactly as projecting the whole timeline at once.
* `start_cursor` / `end_cursor` are the first and last entry's seq, raw cursors of this epoch;
  `has_older` / `has_newer` say whether entries exist before / after the page; epoch, window,
  reset, stale_cursor and gap mean what they mean for raw pages (a reset page is the tail).

To decide its first rows, a page reads FOLD_SPAN rows before its range (and after, to finish
its entries), so it costs about FOLD_SPAN rows more than a raw page, whatever the timeline's
length.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from corral_server.domain.timeline import (
    DEFAULT_PAGE_LIMIT,
    MAX_PAGE_BYTES,
    MAX_PAGE_ROWS,
    AssistantMessage,
    Cursor,
    Direction,
    FetchResult,
    Reasoning,
    TimelineRow,
    TimelineWindow,
)
from corral_server.timeline.projection import FOLD_SPAN, Fold, Projector, TimelineEntry, project
from corral_server.timeline.size import item_bytes, text_bytes

Fetch = Callable[[Direction, Cursor | None, int | None], Awaitable[FetchResult]]

# Re-reads after the epoch changed under a page, before answering with what the last read saw.
_MAX_RETRIES = 3


@dataclass(frozen=True, slots=True)
class ProjectedPage:
    """A projected fetch receipt: `receipt` is the raw one's (epoch, window, has_older /
    has_newer about entries, reset, stale_cursor, gap) with no rows; `entries` stand for them."""

    receipt: FetchResult
    entries: tuple[TimelineEntry, ...]

    @property
    def start_cursor(self) -> Cursor | None:
        return Cursor(self.receipt.epoch, self.entries[0].seq) if self.entries else None

    @property
    def end_cursor(self) -> Cursor | None:
        return Cursor(self.receipt.epoch, self.entries[-1].seq) if self.entries else None


class _EpochMoved(Exception):
    """The timeline was re-based while a page was being read."""


@dataclass(slots=True)
class _Slice:
    """Contiguous rows read so far, whether rows exist beyond either end, what they weigh
    (None: some read did not say), and their folds (recomputed when rows are added in front,
    extended when added behind)."""

    fetch: Fetch
    epoch: str
    window: TimelineWindow
    rows: list[TimelineRow]
    at_start: bool
    at_end: bool
    size: int | None
    _projector: Projector | None = None
    _fed: int = 0

    async def _read(self, direction: Direction, seq: int, count: int) -> FetchResult:
        result = await self.fetch(direction, Cursor(self.epoch, seq), count)
        if result.reset:
            raise _EpochMoved
        self.window = result.window
        if self.size is not None:
            self.size = None if result.size is None else self.size + result.size
        return result

    async def grow_back(self, count: int) -> None:
        result = await self._read(Direction.BEFORE, self.rows[0].seq, count)
        self.rows[:0] = result.rows
        self.at_start = not result.has_older
        self._projector = None  # earlier rows can change how later ones fold

    async def grow_forward(self, count: int) -> None:
        result = await self._read(Direction.AFTER, self.rows[-1].seq, count)
        self.rows.extend(result.rows)
        self.at_end = not result.has_newer

    def trusted(self) -> list[Fold]:
        """The slice's folds whose first row surely is one (not a continuation of a row
        before the slice)."""
        if self._projector is None:
            self._projector, self._fed = Projector(), 0
        self._projector.add_all(self.rows[self._fed :])
        self._fed = len(self.rows)
        folds = self._projector.folds()
        if self.at_start:
            return folds
        floor = self.rows[0].seq + FOLD_SPAN
        return [f for f in folds if f.seq >= floor]

    def finished(self, fold: Fold) -> bool:
        return self.at_end or fold.last_seq + FOLD_SPAN <= self.rows[-1].seq

    def fits(self, entries: int) -> bool:
        """Whether any `entries` entries folded from these rows surely fit one page: an entry
        weighs at most its rows (a fold only joins or drops what they hold) plus its ranges,
        at most one per row, and a second timestamp."""
        if self.size is None:
            return False
        return self.size + 16 * len(self.rows) + 64 * entries <= MAX_PAGE_BYTES


async def fetch_projected(
    fetch: Fetch, direction: Direction, cursor: Cursor | None, limit: int | None
) -> ProjectedPage:
    """A projected page with its receipt; errors (unknown agent, a cursor from the future)
    are the raw fetch's."""
    wanted = _entry_limit(limit)
    for _ in range(_MAX_RETRIES):
        try:
            return await _page(fetch, direction, cursor, wanted)
        except _EpochMoved:
            continue
    return await _page(fetch, Direction.TAIL, None, wanted)


def _entry_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_PAGE_LIMIT
    return MAX_PAGE_ROWS if limit == 0 else min(limit, MAX_PAGE_ROWS)


async def _page(
    fetch: Fetch, direction: Direction, cursor: Cursor | None, wanted: int
) -> ProjectedPage:
    # Entries often hold more than one row: read half as many rows again as entries wanted
    # (a walk back must re-fold all it holds when it reads more in front).
    ahead = wanted if direction is Direction.AFTER else wanted * 3 // 2 + FOLD_SPAN
    first = await fetch(direction, cursor, ahead + FOLD_SPAN)
    if first.reset:
        direction = Direction.TAIL
    if not first.rows:
        return ProjectedPage(first, ())
    part = _Slice(
        fetch,
        first.epoch,
        first.window,
        list(first.rows),
        not first.has_older,
        not first.has_newer,
        first.size,
    )
    if direction is Direction.AFTER:
        assert cursor is not None
        entries, has_newer = await _after(part, cursor.seq, wanted)
    else:
        bound = cursor.seq if direction is Direction.BEFORE and cursor else first.window.next_seq
        entries, has_newer = await _before(part, bound, wanted)
    has_older = bool(entries) and entries[0].seq > part.window.min_seq
    receipt = replace(first, window=part.window, rows=(), has_older=has_older, has_newer=has_newer)
    return ProjectedPage(receipt, tuple(entries))


async def _after(part: _Slice, after_seq: int, wanted: int) -> tuple[list[TimelineEntry], bool]:
    """The oldest `wanted` entries with seq > after_seq, and whether more follow."""
    if not part.at_start:
        await part.grow_back(FOLD_SPAN)
    tries = 0
    while True:
        found = [e for e in part.trusted() if e.seq > after_seq]
        chosen = found[:wanted]
        known = len(found) > wanted or part.at_end
        if known and all(part.finished(e) for e in chosen):
            break
        await part.grow_forward(_more_rows(part, wanted + 1 - len(found), tries))
        tries += 1
    kept = [f.entry() for f in chosen]
    if not part.fits(len(kept)):
        kept = _within_bytes(kept, newest_first=False)
    return kept, len(found) > len(kept)


async def _before(part: _Slice, below: int, wanted: int) -> tuple[list[TimelineEntry], bool]:
    """The newest `wanted` entries with seq < below, and whether any entry follows them."""
    tries = 0
    while True:
        trusted = part.trusted()
        found = [e for e in trusted if e.seq < below]
        if len(found) < wanted and not part.at_start:
            await part.grow_back(_more_rows(part, wanted - len(found), tries))
            tries += 1
            continue
        chosen = found[-wanted:]
        later_known = part.at_end or len(trusted) > len(found)
        if later_known and all(part.finished(e) for e in chosen):
            break
        await part.grow_forward(FOLD_SPAN)
    kept = [f.entry() for f in chosen]
    if not part.fits(len(kept)):
        kept = _within_bytes(kept, newest_first=True)
    return kept, len(trusted) > len(found)


def _entry_bytes(entry: TimelineEntry) -> int:
    """About the entry's encoded size: its item, two timestamps, ids and ranges."""
    item = entry.item
    if type(item) is AssistantMessage or type(item) is Reasoning:
        size = text_bytes(item.text) + 64  # the text and a message id
    else:
        size = item_bytes(item)
    return size + 16 * len(entry.ranges) + 64 + len(entry.turn_id)


def _more_rows(part: _Slice, entries: int, tries: int) -> int:
    """Rows to read for about `entries` more entries, at the slice's rows per entry so far
    (and twice as many on each further try), plus the rows that decide or finish them."""
    folds = max(1, len(part.trusted()))
    per_entry = len(part.rows) / folds
    return int(max(1, entries) * per_entry * 1.25 * 2**tries) + FOLD_SPAN


def _within_bytes(entries: list[TimelineEntry], *, newest_first: bool) -> list[TimelineEntry]:
    """The entries a page of MAX_PAGE_BYTES keeps (at least one), from the end it walks from."""
    order = reversed(entries) if newest_first else iter(entries)
    kept: list[TimelineEntry] = []
    total = 0
    for entry in order:
        total += _entry_bytes(entry)
        if kept and total > MAX_PAGE_BYTES:
            break
        kept.append(entry)
    if newest_first:
        kept.reverse()
    return kept


async def live_seed(fetch: Fetch, epoch: str, seq: int) -> list[TimelineRow]:
    """The rows a live projector must be fed before row `seq` so that the rows from `seq` on
    fold as in the whole timeline: from the first row of the oldest entry that a row at or
    after `seq` could still join (timeline/projection.py's rules) up to `seq - 1`. Never a row
    at or after `seq`. Empty when the epoch has moved on (the reset follows in the stream)."""
    if seq <= 1:
        return []
    result = await fetch(Direction.BEFORE, Cursor(epoch, seq), 2 * FOLD_SPAN)
    if result.reset or not result.rows:
        return []
    part = _Slice(
        fetch, epoch, result.window, list(result.rows), not result.has_older, True, result.size
    )
    while True:
        entries = project(part.rows)
        open_entries = [e for e in entries if e.last_seq >= seq - FOLD_SPAN]
        oldest = min(e.seq for e in open_entries) if open_entries else seq
        if part.at_start or oldest >= part.rows[0].seq + FOLD_SPAN:
            return [row for row in part.rows if row.seq >= oldest]
        try:
            await part.grow_back(4 * FOLD_SPAN)
        except _EpochMoved:
            return []
