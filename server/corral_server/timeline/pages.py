"""Paging, for every timeline store: where a fetch's page lies, from a timeline's head alone, and
the receipt that describes it (docs/design.md#cursors).

A timeline is described by its epoch, `first` (the oldest retained seq, next_seq when none is)
and `next_seq`; its retained seqs are exactly first .. next_seq - 1. A page is the half-open
interval [lo, hi) inside that range, taken from its newest end (TAIL, BEFORE) or its oldest
(AFTER); the store then cuts it by rows and bytes (`max_page_rows`, `max_page_bytes`, from
the end it was taken from, one row at least whatever the limit), measuring only the rows it
keeps, and `receipt` says what was left out (has_older / has_newer), so a client just pages on.

Page positions. A page may be empty and still have a position. has_older = retained rows
exist below the page; has_newer = retained rows exist at or above its end. So:
  * TAIL never has_newer.
  * AFTER the newest row: no rows, has_older when any row exists, has_newer false.
  * BEFORE a cursor at or below the oldest retained row: no rows, has_older false, has_newer
    true (BEFORE is never a gap: the client already holds everything newer than its cursor).
  * An empty timeline: no rows, neither flag.

Cursor seqs. BEFORE accepts seq 0..next_seq (next_seq = "before the head"); AFTER accepts
0..next_seq-1 (0 = "from the very start", next_seq-1 = "after the newest row"). An AFTER cursor
at next_seq or beyond would name a row that does not exist yet, and honouring it would silently
skip that row when it arrives, so it is rejected like any other cursor from the future. A
cursor of another epoch gets the tail, marked stale_cursor and reset; an AFTER cursor older
than the retained rows gets the tail, marked gap and reset.

Pure: no I/O, so it runs wherever the head was read (for the SQLite store, in the reader
thread, inside the same snapshot as the rows). The shared contract suite
(tests/unit/timeline/test_store_contract*.py) holds both stores to these rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, assert_never

from corral_server.domain import timeline as dt
from corral_server.errors import InvalidArgument


class Plan(NamedTuple):
    """Seqs lo .. hi-1, to be cut from the newest end when `newest`, else the oldest."""

    lo: int
    hi: int
    newest: bool
    stale_cursor: bool = False
    gap: bool = False


def checked(direction: dt.Direction, cursor: dt.Cursor | None, limit: int | None) -> int:
    """A fetch's arguments checked (InvalidArgument otherwise); its limit. None = the default
    page; 0 = the whole window (still capped by rows and bytes)."""
    take = _checked_limit(limit)
    _check_cursor(direction, cursor)
    return take


def _checked_limit(limit: int | None) -> int:
    if limit is None:
        return dt.DEFAULT_PAGE_LIMIT
    if limit < 0:
        raise InvalidArgument.field("limit", f"must be 0 (whole window) or more, got {limit}")
    return limit


def _check_cursor(direction: dt.Direction, cursor: dt.Cursor | None) -> None:
    """BEFORE and AFTER need a cursor whose seq is not negative (TAIL's cursor is optional:
    only its epoch counts)."""
    if direction is dt.Direction.TAIL:
        return
    if cursor is None:
        raise InvalidArgument.field("cursor", f"required for direction {direction.value.upper()}")
    if cursor.seq < 0:
        raise InvalidArgument.field("cursor.seq", f"must not be negative, got {cursor.seq}")


def plan(
    epoch: str,
    first: int,
    next_seq: int,
    direction: dt.Direction,
    cursor: dt.Cursor | None,
    limit: int,
) -> Plan:
    """The page for a checked cursor and limit. Raises InvalidArgument for a cursor of this
    epoch that names a seq beyond it."""
    match direction:
        case dt.Direction.TAIL:
            # A TAIL that carries a cursor from another epoch says so: the client's cursors
            # are stale, this page replaces what it holds.
            stale = cursor is not None and bool(cursor.epoch) and cursor.epoch != epoch
            return _tail(first, next_seq, limit, stale_cursor=stale)
        case dt.Direction.BEFORE | dt.Direction.AFTER:
            assert cursor is not None  # `checked` ran first
            if cursor.epoch != epoch:
                return _tail(first, next_seq, limit, stale_cursor=True)
            if direction is dt.Direction.BEFORE:
                return _before(first, next_seq, cursor.seq, limit)
            return _after(first, next_seq, cursor.seq, limit)
        case _:
            assert_never(direction)


def receipt(
    epoch: str,
    first: int,
    next_seq: int,
    where: Plan,
    rows: Sequence[dt.TimelineRow],
    size: int | None = None,
) -> dt.FetchResult:
    """The page of `rows` (the plan's rows as cut, oldest first) with its receipt; `size`:
    what the rows weigh, if the store added it up."""
    low = rows[0].seq if rows else where.lo
    high = rows[-1].seq + 1 if rows else where.hi
    return dt.FetchResult(
        epoch=epoch,
        window=window(first, next_seq),
        rows=tuple(rows),
        has_older=low > first,
        has_newer=high < next_seq,
        reset=where.stale_cursor or where.gap,
        stale_cursor=where.stale_cursor,
        gap=where.gap,
        size=size,
    )


def window(first: int, next_seq: int) -> dt.TimelineWindow:
    if first == next_seq:
        return dt.TimelineWindow(0, 0, next_seq)
    return dt.TimelineWindow(first, next_seq - 1, next_seq)


def _tail(
    first: int, next_seq: int, limit: int, *, stale_cursor: bool = False, gap: bool = False
) -> Plan:
    lo = first if limit == 0 else max(first, next_seq - limit)
    return Plan(lo, next_seq, True, stale_cursor, gap)


def _before(first: int, next_seq: int, seq: int, limit: int) -> Plan:
    if seq > next_seq:
        raise _future_cursor(seq, next_seq)
    # Never a gap: the client holds everything from the cursor on; older rows are just gone.
    hi = max(first, seq)
    lo = first if limit == 0 else max(first, hi - limit)
    return Plan(lo, hi, True)


def _after(first: int, next_seq: int, seq: int, limit: int) -> Plan:
    if seq >= next_seq:
        raise _future_cursor(seq, next_seq - 1)
    lo = seq + 1
    if lo < first:
        # Rows the client never saw (lo .. first-1) are gone: it must start again.
        return _tail(first, next_seq, limit, gap=True)
    hi = next_seq if limit == 0 else min(next_seq, lo + limit)
    return Plan(lo, hi, False)


def _future_cursor(seq: int, newest_allowed: int) -> InvalidArgument:
    return InvalidArgument.field(
        "cursor.seq",
        f"seq {seq} is beyond this epoch's timeline (at most {newest_allowed} here)",
    )
