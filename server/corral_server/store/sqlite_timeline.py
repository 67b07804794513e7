"""The SQLite timeline store: the `TimelineStore` contract, durable (schema in store/schema.py).

Owns the timelines' heads in memory and the timeline tables on disk. Every write is queued on
the loop and group committed: writes queued while a commit is in flight (from any agent) go
to the database as ONE job in the next transaction, so a burst costs one fsync per commit,
not per row, and a future resolves only once its rows are durable.

Two views of each head, both in memory:
  * `_committed`: what the database holds. `head()` and the agent check of `fetch` read it;
    each commit's callback advances it before any of the commit's futures resolves.
  * `_reserved`: `_committed` plus every queued write. Writes take their seqs, epochs and
    timeline ids from it, on the loop, at call time: the single writer knows a row's seq
    before the row is durable, and pipelined appends stay contiguous.
A failed commit fails its writes and every write queued behind it (their seqs were taken
after the failed ones), and `_reserved` returns to `_committed`: no gap, no half-written row.

Reads run in the database's reader thread, the head and the rows from one snapshot, so a page
never mixes epochs nor misses rows that retention dropped meanwhile. Items are encoded on the
loop (a codec error fails the call, not the commit), or arrive encoded from the single writer
(`append_encoded`: the bytes it encoded once for the row's event too), and are decoded in the
reader thread. The threads' halves are store/timeline_tables.py's.

Must not: import protobuf or grpc (the codec is injected), or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Unpack

from corral_server.domain.timeline import (
    Cursor,
    Direction,
    FetchResult,
    TimelineHead,
    TimelineRow,
    ToolCall,
)
from corral_server.errors import AgentNotFound
from corral_server.jobs import resolved
from corral_server.store import search
from corral_server.store.commits import GroupCommit, Job
from corral_server.store.database import Database
from corral_server.store.packed_rows import RowBatch
from corral_server.store.timeline_tables import (
    Head,
    Kind,
    Op,
    PageRequest,
    load_heads,
    read_page,
    write,
)
from corral_server.store.tool_outputs import OutputWrite, read_output, sweep_outputs
from corral_server.timeline import pages
from corral_server.timeline.store import ItemCodec, NewRow, Options, OutputChunk, checked_options

if TYPE_CHECKING:
    from corral_server.timeline.store import TimelineStore


class SqliteTimelineStore:
    """A `TimelineStore` in the database. Open with `await SqliteTimelineStore.open(db, codec)`.
    The options are timeline/store.py's `Options`, and `search_index`: on, each appended row is
    indexed in its transaction (store/search.py); off, an append computes no index entry at
    all, and opening marks the rows for a later start with the index on to index in the
    background."""

    def __init__(
        self,
        database: Database,
        codec: ItemCodec,
        *,
        search_index: bool = False,
        **options: Unpack[Options],
    ) -> None:
        self._db = database
        self._codec = codec
        self._limits = checked_options(options)
        self._retain_rows = self._limits.retain_rows
        self._epoch_factory = self._limits.epoch_factory
        self._search_index = search_index
        self._committed: dict[str, Head] = {}
        self._reserved: dict[str, Head] = {}
        self._next_timeline_id = 1
        self._queued: list[Op] = []  # waiting for the next commit
        # The database's group commit, shared with its other stores (store/commits.py).
        self._commits = GroupCommit(database, self._take)

    @classmethod
    async def open(
        cls, database: Database, codec: ItemCodec, **options: Any
    ) -> SqliteTimelineStore:
        """The store with every head loaded (one scan of the timelines table)."""
        store = cls(database, codec, **options)
        heads, top_id = await database.read(load_heads)
        store._committed = heads
        store._reserved = dict(heads)
        store._next_timeline_id = top_id + 1
        if not store._search_index:
            await database.write(search.mark_unindexed)
        await database.write(sweep_outputs)  # what a rebase left for a copy to take over
        return store

    # --- writes: queued on the loop, committed together ----------------------------------

    async def create(self, agent_id: str, epoch: str | None = None) -> TimelineHead:
        """Create an empty timeline (`epoch`: the one a cluster's stream names, else a new
        one). Creating one that exists is a caller bug (ValueError)."""
        return await self.create_nowait(agent_id, epoch)

    def create_nowait(
        self, agent_id: str, epoch: str | None = None
    ) -> asyncio.Future[TimelineHead]:
        """`create` queued at this call (a cluster's follower queues it beside the rows)."""
        if agent_id in self._reserved:
            raise ValueError(f"agent {agent_id!r} already has a timeline")
        head = self._fresh_head(epoch)
        head_out: asyncio.Future[TimelineHead] = self._queue(
            Kind.CREATE, agent_id, None, head, None, TimelineHead(head.epoch, 1)
        )
        return head_out

    async def append(self, agent_id: str, rows: Sequence[NewRow]) -> list[TimelineRow]:
        return await self.append_nowait(agent_id, rows)

    def append_nowait(
        self, agent_id: str, rows: Sequence[NewRow]
    ) -> asyncio.Future[list[TimelineRow]]:
        future: asyncio.Future[list[TimelineRow]] = self._append(agent_id, rows, None, True)
        return future

    def append_encoded(
        self, agent_id: str, rows: Sequence[NewRow], items: Sequence[bytes] | None
    ) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._append(agent_id, rows, items, False)
        return future

    def _append(
        self,
        agent_id: str,
        rows: Sequence[NewRow],
        items: Sequence[bytes] | None,
        rows_back: bool,
    ) -> asyncio.Future[Any]:
        """Queue `rows` (`items`: their encoded items, or None to encode them here). The
        writer's hot path: the rows go to the writer thread as they are, packed there into
        one statement (store/packed_rows.py), and row objects are built only when the caller
        wants them back (the search index reads the rows as given)."""
        before = self._reserved_head(agent_id)
        if not rows:
            return resolved([] if rows_back else None)
        if items is None:
            encode = self._codec.encode
            items = [encode(row[0]) for row in rows]  # a codec error fails this call
        elif len(items) != len(rows):
            raise ValueError(f"{len(items)} encoded items for {len(rows)} rows")
        seq, tid, count = before.next_seq, before.timeline_id, len(rows)
        batch = RowBatch(tid, seq, rows if type(rows) is tuple else list(rows), items)
        outputs = _outputs(tid, seq, rows) if ToolCall in set(map(type, map(_ITEM, rows))) else []
        stored: list[TimelineRow] | None = None
        if rows_back:
            stored = [
                TimelineRow(seq + i, timestamp_ms, item, turn_id, provider_message_id)
                for i, (item, timestamp_ms, turn_id, provider_message_id, _) in enumerate(rows)
            ]
        first = before.first
        if self._retain_rows is not None:
            first = max(first, seq + count - self._retain_rows)
        after = Head(tid, before.epoch, seq + count, first)
        payload = (batch, outputs, list(rows) if self._search_index else None)
        return self._queue(
            Kind.APPEND, agent_id, before, after, payload, stored if rows_back else None
        )

    async def rebase(self, agent_id: str, epoch: str | None = None) -> TimelineHead:
        return await self.rebase_nowait(agent_id, epoch)

    def rebase_nowait(
        self, agent_id: str, epoch: str | None = None
    ) -> asyncio.Future[TimelineHead]:
        before = self._reserved_head(agent_id)
        after = self._fresh_head(epoch)
        head_out: asyncio.Future[TimelineHead] = self._queue(
            Kind.REBASE, agent_id, before, after, None, TimelineHead(after.epoch, 1)
        )
        return head_out

    async def set_provider_message_id(
        self, agent_id: str, seq: int, provider_message_id: str
    ) -> None:
        """A seq outside the retained window is a no-op (dropped by retention or rebase)."""
        await self.set_provider_message_id_nowait(agent_id, seq, provider_message_id)

    def set_provider_message_id_nowait(
        self, agent_id: str, seq: int, provider_message_id: str
    ) -> asyncio.Future[None]:
        head = self._reserved_head(agent_id)
        if not head.first <= seq < head.next_seq:
            return resolved(None)
        payload = (seq, provider_message_id)
        done: asyncio.Future[None] = self._queue(
            Kind.SET_PROVIDER_MESSAGE_ID, agent_id, head, head, payload, None
        )
        return done

    async def drop(self, agent_id: str) -> None:
        """Forget the timeline and delete its rows; dropping an unknown agent is a no-op."""
        await self.drop_nowait(agent_id)

    def drop_nowait(self, agent_id: str) -> asyncio.Future[None]:
        before = self._reserved.get(agent_id)
        if before is None:
            return resolved(None)
        done: asyncio.Future[None] = self._queue(Kind.DROP, agent_id, before, None, None, None)
        return done

    def _fresh_head(self, epoch: str | None = None) -> Head:
        tid = self._next_timeline_id
        self._next_timeline_id += 1
        return Head(tid, epoch or self._epoch_factory(), 1, 1)

    def _reserved_head(self, agent_id: str) -> Head:
        """The head writes take their seqs from (AgentNotFound when there is none)."""
        head = self._reserved.get(agent_id)
        if head is None:
            raise AgentNotFound(agent_id)
        return head

    def _queue(
        self,
        kind: Kind,
        agent_id: str,
        before: Head | None,
        after: Head | None,
        payload: Any,
        result: Any,
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append(Op(kind, agent_id, before, after, payload, result, future))
        if after is None:
            del self._reserved[agent_id]
        else:
            self._reserved[agent_id] = after
        self._commits.wake()
        return future

    def _take(self) -> Job | None:
        if not self._queued:
            return None
        ops, self._queued = self._queued, []
        return Job(
            partial(write, ops, self._search_index),
            partial(self._committed_ops, ops),
            partial(self._failed, ops),
        )

    def _committed_ops(self, ops: list[Op], _: None) -> None:
        committed = self._committed
        for op in ops:
            if op.after is None:
                committed.pop(op.agent_id, None)
            else:
                committed[op.agent_id] = op.after
        for op in ops:
            if not op.future.done():
                op.future.set_result(op.result)

    def _failed(self, ops: list[Op], error: BaseException) -> None:
        """The commit failed: so does every write queued behind it (their seqs were counted
        after the failed ones); the reserved heads return to what is committed."""
        failed, self._queued = ops + self._queued, []
        self._reserved = dict(self._committed)
        for op in failed:
            if not op.future.done():
                op.future.set_exception(error)

    # --- reads ----------------------------------------------------------------------------

    @property
    def search_index(self) -> bool:
        """Whether appends index their rows (then they read each row's item)."""
        return self._search_index

    def reserved_next_seq(self, agent_id: str) -> int:
        """The seq the next row handed over gets (KeyError when the agent has no timeline)."""
        return self._reserved[agent_id].next_seq

    def head(self, agent_id: str) -> TimelineHead:
        """The committed head (KeyError when the agent has no committed timeline)."""
        head = self._committed[agent_id]
        return TimelineHead(head.epoch, head.next_seq)

    async def fetch(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        if agent_id not in self._committed:
            raise AgentNotFound(agent_id)
        take = pages.checked(direction, cursor, limit)
        limits = self._limits
        request = PageRequest(
            agent_id,
            direction,
            cursor,
            take,
            limits.max_page_rows,
            limits.max_page_bytes,
            self._codec.decode,
        )
        return await self._db.read(partial(read_page, request))

    async def read_output(
        self, agent_id: str, blob_id: str, offset: int, limit: int
    ) -> OutputChunk:
        if agent_id not in self._committed:
            raise AgentNotFound(agent_id)
        read = partial(read_output, agent_id, blob_id, offset, limit)
        chunk: OutputChunk = await self._db.read(read)
        return chunk


_ITEM = itemgetter(0)  # a NewRow's


def _outputs(tid: int, seq: int, rows: Sequence[NewRow]) -> list[OutputWrite]:
    """The kept tool outputs of `rows` (the first numbered `seq`) of timeline `tid`."""
    outputs: list[OutputWrite] = []
    for offset, row in enumerate(rows):
        item = row.item
        if type(item) is ToolCall and item.output_ref is not None:
            ref = item.output_ref
            outputs.append(OutputWrite(ref.blob_id, tid, seq + offset, ref.json, row.output))
    return outputs


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: SqliteTimelineStore) -> TimelineStore:
        return store  # mypy proves SqliteTimelineStore implements TimelineStore
