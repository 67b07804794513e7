"""The projected view of a timeline: stored rows folded into entries for rendering
(docs/design.md#projections).

Owns the fold rules and the entry values. It reads rows and never changes them: the stored
rows stay canonical, and a projection is recomputed from them on every read, so it survives a
restart and always agrees with the raw view. Pure (no I/O, no protobuf).

The fold rules, each decided from at most FOLD_SPAN rows before a row, so any slice of rows
that starts FOLD_SPAN rows early projects its later rows exactly as the whole timeline would:

1. a row of assistant text joins the entry of the row just before it (seq - 1) when that row
   is assistant text of the same turn and message (the key the coalescer joins fragments by,
   docs/design.md#coalescing); reasoning likewise;
2. a tool-call row joins the entry of the latest earlier row of the same call (same turn, same
   non-empty call id) when that row is at most FOLD_SPAN seqs back; a call whose updates lie
   further apart shows as two entries;
3. any other row is an entry of its own;
4. a long message is cut into entries at every seq that is a multiple of TEXT_CUT_EVERY whose
   FOLD_SPAN rows before it are all of that message, so no entry (and no page) has to read
   an unbounded run of rows; a message shorter than FOLD_SPAN rows is never cut.

An entry's `seq` is its first row's (its anchor); entries are ordered by it, and each entry
lists the exact seq ranges of its rows (`ranges`), which partition the rows it was made from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from corral_server.domain.timeline import (
    MAX_ROW_BYTES,
    AssistantMessage,
    JsonValue,
    Reasoning,
    TimelineItem,
    TimelineRow,
    ToolCall,
)
from corral_server.timeline.size import item_bytes, json_bytes, text_bytes

# How far back (in seqs) a tool-call update may join an earlier update of the same call. The
# coalescer stores a call's updates close together (a terminal status at once), so 32 covers
# what providers send; a page reads this many rows before its range to decide its first rows.
FOLD_SPAN = 32
# Where a long run of one message's rows is cut into entries (rule 4 above): about every 256
# rows, so a page finishing an entry reads at most that many more rows.
TEXT_CUT_EVERY = 256
# A folded text entry keeps at most this much text (UTF-8 bytes), so an entry is never larger
# than one stored row can be; the rest is marked `truncated` (its rows hold all of it).
MAX_ENTRY_TEXT_BYTES = MAX_ROW_BYTES - 64 * 1024

_new_tuple = cast(Any, tuple.__new__)


class SeqRange(NamedTuple):
    """Rows `start`..`end` (both inclusive) of one epoch."""

    start: int
    end: int


class TimelineEntry(NamedTuple):
    """One projected entry. `seq` is its first row's seq; `ranges` are sorted and disjoint,
    and `ranges[-1].end` is its newest row. `truncated`: the text was longer than
    MAX_ENTRY_TEXT_BYTES and the rest is only in the rows. (NamedTuples, as TimelineRow: a
    page builds hundreds, at a third of a frozen dataclass's cost.)"""

    seq: int
    ranges: tuple[SeqRange, ...]
    item: TimelineItem
    timestamp_ms: int
    updated_ms: int
    turn_id: str = ""
    provider_message_id: str = ""
    truncated: bool = False

    @property
    def last_seq(self) -> int:
        return self.ranges[-1].end

    def row_count(self) -> int:
        return sum(r.end - r.start + 1 for r in self.ranges)


def _text_key(row: TimelineRow) -> tuple[str, str, str] | None:
    """What two adjacent text rows must share to be one message: kind, turn and the message
    key the coalescer joins fragments by (the provider's message id, else the item's)."""
    item = row.item
    if type(item) is AssistantMessage:
        return ("assistant", row.turn_id, row.provider_message_id or item.message_id)
    if type(item) is Reasoning:
        return ("reasoning", row.turn_id, row.provider_message_id)
    return None


@dataclass(slots=True)
class Fold:
    """An entry while rows may still join it (mutable); `entry()` freezes what it holds.
    Deciding a page needs only `seq` and `last_seq`, so entries are built only for the folds
    a page keeps."""

    first: TimelineRow
    ranges: list[list[int]]
    item: TimelineItem
    updated_ms: int
    # The joined text once a second row joins (None: the first row's text alone).
    parts: list[str] | None = None
    text_size: int = 0
    truncated: bool = False
    # A call's updates not yet merged into `item`: merged when an entry is built, so a page
    # merges only the calls it keeps.
    calls: list[ToolCall] | None = None

    @property
    def seq(self) -> int:
        return self.first.seq

    @property
    def last_seq(self) -> int:
        return self.ranges[-1][1]

    def take(self, row: TimelineRow) -> None:
        last = self.ranges[-1]
        if row.seq == last[1] + 1:
            last[1] = row.seq
        else:
            self.ranges.append([row.seq, row.seq])
        self.updated_ms = row.timestamp_ms
        item = row.item
        if type(item) is ToolCall:
            if self.calls is None:
                self.calls = [item]
            else:
                self.calls.append(item)
        elif type(item) is AssistantMessage or type(item) is Reasoning:
            self._add_text(item.text)

    def _add_text(self, text: str) -> None:
        if self.parts is None:
            first = self.item
            assert type(first) is AssistantMessage or type(first) is Reasoning
            self.parts = [first.text]
            self.text_size = text_bytes(first.text)
        if self.truncated:
            return
        size = text_bytes(text)
        if self.text_size + size > MAX_ENTRY_TEXT_BYTES:
            self.truncated = True
            return
        self.parts.append(text)
        self.text_size += size

    def entry(self) -> TimelineEntry:
        if self.calls is not None:
            call = self.item
            assert type(call) is ToolCall
            for update in self.calls:
                call = _merged_call(call, update)
            self.item, self.calls = call, None
        item = self.item
        if self.parts is not None:
            text = "".join(self.parts)
            if type(item) is AssistantMessage:
                item = AssistantMessage(text, item.message_id)
            else:
                item = Reasoning(text)
        elif type(item) is ToolCall and (_nonfinite(item.input) or _nonfinite(item.output)):
            item = ToolCall(
                item.call_id,
                item.name,
                item.status,
                finite_json(item.input),
                finite_json(item.output),
                item.error,
                item.output_ref,
            )
        first = self.first
        return TimelineEntry(
            first.seq,
            _ranges(self.ranges),
            item,
            first.timestamp_ms,
            self.updated_ms,
            first.turn_id,
            first.provider_message_id,
            self.truncated,
        )


def _ranges(ranges: list[list[int]]) -> tuple[SeqRange, ...]:
    # tuple.__new__ straight from each [start, end] pair: a NamedTuple's own constructor is a
    # Python function, called for every range of every entry of a page.
    return tuple([_new_tuple(SeqRange, r) for r in ranges])


def _merged_call(old: ToolCall, new: ToolCall) -> ToolCall:
    """The newest update wins; a name or input only an earlier update carried is kept, unless
    keeping it would make the entry larger than one row may be."""
    name = new.name or old.name
    if new.input is not None or old.input is None:
        if name == new.name:
            return new
        return ToolCall(
            new.call_id, name, new.status, new.input, new.output, new.error, new.output_ref
        )
    merged = ToolCall(
        new.call_id, name, new.status, old.input, new.output, new.error, new.output_ref
    )
    # Each row is at most MAX_ROW_BYTES; measure only when the two parts together may not be.
    if json_bytes(old.input) + json_bytes(new.output) <= MAX_ROW_BYTES // 2:
        return merged
    return merged if item_bytes(merged) <= MAX_ROW_BYTES else new


def _nonfinite(value: JsonValue) -> bool:
    """Whether `value` holds a NaN or an infinity anywhere (without building anything)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    children: Iterable[JsonValue]
    if isinstance(value, dict):
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return False
    # A loop, not any() over a generator (a frame per call): most hold a few strings.
    for child in children:  # noqa: SIM110
        if type(child) is not str and _nonfinite(child):
            return True
    return False


def finite_json(value: JsonValue) -> JsonValue:
    """`value` without its non-finite numbers (NaN, +-inf): an object drops such a member, an
    array such an element; a non-finite number alone becomes null. JSON has no such numbers,
    and a client must never be handed one."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {
            k: finite_json(v)
            for k, v in value.items()
            if not (isinstance(v, float) and not math.isfinite(v))
        }
    if isinstance(value, list):
        return [
            finite_json(v) for v in value if not (isinstance(v, float) and not math.isfinite(v))
        ]
    return value


class Projector:
    """Folds rows, fed in seq order, into entries. `add` answers the entry the row made or
    changed; `entries` lists every entry so far in seq order. A projector fed a slice that
    starts mid-timeline may give its first FOLD_SPAN rows' entries wrongly (they may continue
    rows it never saw); the page reader discards those (timeline/projected_pages.py)."""

    def __init__(self, *, keep_all: bool = True) -> None:
        self._keep_all = keep_all
        self._folds: list[Fold] = []
        self._text: Fold | None = None
        self._text_key: tuple[str, str, str] | None = None
        self._last_seq = 0
        # The first seq of the run of adjacent rows of one message the last row ends.
        self._run_start = 0
        self._calls: dict[tuple[str, str], tuple[int, Fold]] = {}

    def add(self, row: TimelineRow) -> TimelineEntry:
        return self._add(row).entry()

    def _add(self, row: TimelineRow) -> Fold:
        # The hot loop of every projected page (hundreds of rows a page): the join test is
        # written out here rather than called.
        item, seq = row.item, row.seq
        fold: Fold | None = None
        key: tuple[str, str, str] | None = None
        call_id = ""
        if type(item) is ToolCall:
            call_id = item.call_id
            seen = self._calls.get((row.turn_id, call_id)) if call_id else None
            if seen is not None and seq - seen[0] <= FOLD_SPAN:
                fold = seen[1]
        else:
            key = _text_key(row)
            # A long run of one message is cut every TEXT_CUT_EVERY rows, so an entry never
            # needs more than a bounded walk back to find where it starts.
            if (
                key is not None
                and seq == self._last_seq + 1
                and key == self._text_key
                and (seq % TEXT_CUT_EVERY or self._run_start > seq - FOLD_SPAN)
            ):
                fold = self._text
        if fold is not None:
            fold.take(row)
        else:
            fold = Fold(row, [[seq, seq]], item, row.timestamp_ms)
            if self._keep_all:
                self._folds.append(fold)
        if call_id:
            self._calls[(row.turn_id, call_id)] = (seq, fold)
        if key is None or key != self._text_key or seq != self._last_seq + 1:
            self._run_start = seq
        self._text_key = key
        self._text = fold if key is not None else None
        self._last_seq = seq
        if not self._keep_all and len(self._calls) > 4 * FOLD_SPAN:
            self._forget_calls(seq)
        return fold

    def _forget_calls(self, seq: int) -> None:
        # A live projector keeps only the calls a later row could still join.
        self._calls = {k: v for k, v in self._calls.items() if seq - v[0] < FOLD_SPAN}

    def add_all(self, rows: Iterable[TimelineRow]) -> None:
        for row in rows:
            self._add(row)

    def folds(self) -> list[Fold]:
        return self._folds

    def entries(self) -> list[TimelineEntry]:
        return [fold.entry() for fold in self._folds]


def project(rows: Sequence[TimelineRow]) -> list[TimelineEntry]:
    """Every entry of `rows` (seq-ordered and contiguous), as if nothing came before them."""
    projector = Projector()
    projector.add_all(rows)
    return projector.entries()
