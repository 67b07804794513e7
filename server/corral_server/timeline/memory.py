"""The in-memory timeline store: rows, seqs and epochs of every agent, held in lists.

Owns seq and epoch minting for the in-memory backend; where a page lies and its receipt are
timeline/pages.py's, shared with the SQLite store. It does no I/O and must not import protobuf
or grpc.

Seeking never scans: seqs are contiguous within an epoch, so the list index of a seq is
arithmetic, and a page costs one slice of `limit` rows whether the timeline holds 1 k or 1 M.
Only the rows a page keeps are measured against its byte cap (sizes are not kept: that would
cost the writer on every row), so `limit: 0` over 80 MB costs one page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Unpack

from corral_server.domain.timeline import (
    Cursor,
    Direction,
    FetchResult,
    TimelineHead,
    TimelineRow,
    ToolCall,
)
from corral_server.errors import AgentNotFound
from corral_server.timeline import pages
from corral_server.timeline.outputs import MemoryOutputs
from corral_server.timeline.size import row_bytes
from corral_server.timeline.store import NewRow, Options, OutputChunk, checked_options

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

    def retain(self, limit: int) -> None:
        excess = len(self.rows) - self.start - limit
        if excess <= 0:
            return
        self.start += excess
        if self.start >= _COMPACT_MIN_DEAD and self.start * 2 >= len(self.rows):
            del self.rows[: self.start]
            self.start = 0


class InMemoryTimelineStore:
    """A `TimelineStore` in memory, with timeline/store.py's `Options`."""

    def __init__(self, *, outputs: MemoryOutputs | None = None, **options: Unpack[Options]) -> None:
        self._limits = checked_options(options)
        self._retain_rows = self._limits.retain_rows
        self._epoch_factory = self._limits.epoch_factory
        self._timelines: dict[str, _Timeline] = {}
        self._outputs = outputs or MemoryOutputs()  # large tool outputs, with a total bound

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
        for i, row in enumerate(rows):
            if type(row.item) is ToolCall and row.item.output_ref is not None:
                self._keep_output(agent_id, timeline.epoch, seq + i, row)
        if self._retain_rows is not None:
            timeline.retain(self._retain_rows)
            self._outputs.trim(agent_id, timeline.epoch, timeline.first)
        return appended

    def _keep_output(self, agent_id: str, epoch: str, seq: int, row: NewRow) -> None:
        assert type(row.item) is ToolCall and row.item.output_ref is not None
        ref = row.item.output_ref
        if row.output is None:
            self._outputs.take_over(agent_id, epoch, seq, ref.blob_id)
        else:
            self._outputs.put(agent_id, epoch, seq, ref.blob_id, row.output, ref.json)

    def append_nowait(
        self, agent_id: str, rows: Sequence[NewRow]
    ) -> asyncio.Future[list[TimelineRow]]:
        """Appends at once (memory needs no commit) and returns a completed future."""
        future: asyncio.Future[list[TimelineRow]] = asyncio.get_running_loop().create_future()
        future.set_result(self._append(agent_id, rows))
        return future

    def append_encoded(
        self, agent_id: str, rows: Sequence[NewRow], items: Sequence[bytes] | None
    ) -> asyncio.Future[None]:
        """Appends at once; memory keeps the items themselves, so `items` is not needed."""
        self._append(agent_id, rows)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def fetch(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        timeline = self._get(agent_id)
        take = pages.checked(direction, cursor, limit)
        first, next_seq = timeline.first, timeline.next_seq
        where = pages.plan(timeline.epoch, first, next_seq, direction, cursor, take)
        rows, size = _cut(timeline, where, self._limits.max_page_rows, self._limits.max_page_bytes)
        return pages.receipt(timeline.epoch, first, next_seq, where, rows, size)

    def head(self, agent_id: str) -> TimelineHead:
        timeline = self._timelines[agent_id]
        return TimelineHead(timeline.epoch, timeline.next_seq)

    async def rebase(self, agent_id: str) -> TimelineHead:
        old = self._get(agent_id)
        self._outputs.sweep(
            agent_id, old.epoch
        )  # earlier epochs' outputs; this one's may be taken over
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
        self._outputs.sweep(agent_id, None)

    async def read_output(
        self, agent_id: str, blob_id: str, offset: int, limit: int
    ) -> OutputChunk:
        timeline = self._get(agent_id)
        window = (timeline.epoch, timeline.first, timeline.next_seq)
        return self._outputs.read(agent_id, blob_id, window, offset, limit)

    def _get(self, agent_id: str) -> _Timeline:
        try:
            return self._timelines[agent_id]
        except KeyError:
            raise AgentNotFound(agent_id) from None


def _cut(
    timeline: _Timeline, where: pages.Plan, max_rows: int, max_bytes: int
) -> tuple[list[TimelineRow], int | None]:
    """The plan's rows, cut to `max_rows` and `max_bytes` from the plan's end: the rows that
    fit, always one at least, and what they weigh (None when they had to be cut). Measures
    only the rows it keeps (and one more)."""
    rows = timeline.rows
    i, j = timeline.index(where.lo), timeline.index(where.hi)
    if j - i > max_rows:
        i, j = (j - max_rows, j) if where.newest else (i, i + max_rows)
    budget = max_bytes
    size = sum(map(row_bytes, rows[i:j]))  # the common case, measured in one C loop
    if size <= budget:
        return rows[i:j], size
    if where.newest:
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
    return rows[i:j], None


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: InMemoryTimelineStore) -> TimelineStore:
        return store  # mypy proves InMemoryTimelineStore implements TimelineStore
