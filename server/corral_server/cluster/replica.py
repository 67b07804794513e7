"""The stores and the publisher an owner's actors write through on a cluster node: each write
becomes entries (entries.py) on the agent's channel (channel.py) instead of a local commit.
The stream is the commit; the node's own follower applies it to the local stores, and a
write's future resolves once it has (so a read after it sees it). Reads go to the local
stores, which hold the read model.

They plug in where the single daemon's SQLite stores and hub do: `ClusterTimeline` is a
`TimelineStore`, `ClusterRecords` an `AgentRecords`, `ClusterPublisher` the manager's
`Publisher` with joint commits (a row's event travels in the same batch as the row, so it is
never public before the row is stored).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from corral_server.cluster import entries
from corral_server.cluster.channel import AgentChannel
from corral_server.domain import events as ev
from corral_server.domain.agent import Agent
from corral_server.domain.timeline import (
    Cursor,
    Direction,
    FetchResult,
    TimelineHead,
    TimelineRow,
)
from corral_server.errors import AgentNotFound, AgentOwnedElsewhere
from corral_server.hub import EventHub, Prepared
from corral_server.records.store import LoadedAgents
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.format.agents import encode_agent
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import ItemCodec, NewRow, OutputChunk, new_epoch

log = logging.getLogger(__name__)

# The channel of an agent this node owns; with True, opened for an agent made here. Raises
# AgentOwnedElsewhere for another node's agent.
ChannelOf = Callable[[str, bool], AgentChannel]


def _sent(future: asyncio.Future[None] | None) -> asyncio.Future[None]:
    assert future is not None
    return future


class ClusterTimeline:
    def __init__(self, inner: SqliteTimelineStore, codec: ItemCodec, channel: ChannelOf) -> None:
        self._inner = inner
        self._codec = codec
        self._channel = channel
        self._next: dict[str, int] = {}  # the seq the next row sent gets, per agent

    async def create(self, agent_id: str) -> TimelineHead:
        epoch = new_epoch()
        await _sent(self._channel(agent_id, True).send([entries.epoch_entry(b"T", epoch)]))
        self._next[agent_id] = 1
        return TimelineHead(epoch, 1)

    async def append(self, agent_id: str, rows: Sequence[NewRow]) -> list[TimelineRow]:
        return await self.append_nowait(agent_id, rows)

    def append_nowait(
        self, agent_id: str, rows: Sequence[NewRow]
    ) -> asyncio.Future[list[TimelineRow]]:
        first = self._next_seq(agent_id)
        sent = self.append_encoded(agent_id, rows, None)
        out: asyncio.Future[list[TimelineRow]] = asyncio.get_running_loop().create_future()
        stored = [TimelineRow(first + i, r[1], r[0], r[2], r[3]) for i, r in enumerate(rows)]

        def settle(done: asyncio.Future[None]) -> None:
            failure = done.exception() if not done.cancelled() else asyncio.CancelledError()
            if failure is None:
                out.set_result(stored)
            else:
                out.set_exception(failure)

        sent.add_done_callback(settle)
        return out

    def append_encoded(
        self, agent_id: str, rows: Sequence[NewRow], items: Sequence[bytes] | None
    ) -> asyncio.Future[None]:
        first = self._next_seq(agent_id)
        if items is None:
            items = [self._codec.encode(row.item) for row in rows]
        sent: list[bytes] = []
        kept: list[entries.SentRow] = []  # as they are, for this node's own follower
        for seq, (row, item) in enumerate(zip(rows, items, strict=True), first):
            sent.append(entries.row_entry(seq, row, item))
            kept.append((seq, row, item))
        self._next[agent_id] = first + len(rows)
        return _sent(self._channel(agent_id, False).send(sent, rows=kept))

    def _next_seq(self, agent_id: str) -> int:
        seq = self._next.get(agent_id)
        if seq is not None:
            return seq
        try:
            return self._inner.reserved_next_seq(agent_id)
        except KeyError:
            raise AgentNotFound(agent_id) from None

    async def fetch(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        return await self._inner.fetch(agent_id, direction, cursor, limit)

    def head(self, agent_id: str) -> TimelineHead:
        return self._inner.head(agent_id)

    async def rebase(self, agent_id: str) -> TimelineHead:
        epoch = new_epoch()
        await _sent(self._channel(agent_id, False).send([entries.epoch_entry(b"B", epoch)]))
        self._next[agent_id] = 1
        return TimelineHead(epoch, 1)

    async def set_provider_message_id(
        self, agent_id: str, seq: int, provider_message_id: str
    ) -> None:
        entry = entries.message_id_entry(seq, provider_message_id)
        await _sent(self._channel(agent_id, False).send([entry]))

    async def drop(self, agent_id: str) -> None:
        await _sent(self._channel(agent_id, False).send([entries.DROPPED]))
        self._next.pop(agent_id, None)

    async def read_output(
        self, agent_id: str, blob_id: str, offset: int, limit: int
    ) -> OutputChunk:
        return await self._inner.read_output(agent_id, blob_id, offset, limit)


class ClusterRecords:
    def __init__(self, inner: SqliteAgentRecords, channel: ChannelOf) -> None:
        self._inner = inner
        self._channel = channel

    def put(self, agent: Agent) -> asyncio.Future[None]:
        return _sent(
            self._channel(agent.id, False).send(
                [entries.record_entry(encode_agent(agent, whole=True))]
            )
        )

    def delete(self, agent_id: str) -> asyncio.Future[None]:
        return _sent(self._channel(agent_id, False).send([entries.DELETED]))

    async def load_headers(self) -> LoadedAgents:
        return await self._inner.load_headers()


class ClusterPublisher:
    """The hub as an owner's actors see it: encoding is the hub's, publishing is an append
    of the event to the agent's channel; the follower hands it to the hub, numbered."""

    def __init__(self, hub: EventHub, channel: ChannelOf) -> None:
        self._hub = hub
        self._channel = channel

    @property
    def joint_commits(self) -> bool:
        return True  # an event goes in the same batch as the rows handed over before it

    def discard(self, first: int, last: int) -> None:
        """Nothing to drop: a failed batch failed its rows and events together, and the
        agent's channel is broken, so nothing after them is appended either."""

    def prepare(self, event: ev.Event) -> Prepared:
        return self._hub.prepare(event)

    def prepare_rows(
        self, agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
    ) -> tuple[list[Prepared], list[bytes] | None]:
        return self._hub.prepare_rows(agent_id, epoch, first_seq, rows)

    def commit(self, prepared: Prepared) -> int:
        return self.commit_many((prepared,))

    def commit_many(self, prepared: Sequence[Prepared]) -> int:
        """Append the events; 0, as their revisions are the follower's to give."""
        at = 0
        while at < len(prepared):
            agent_id = prepared[at][0]
            end = at
            while end < len(prepared) and prepared[end][0] == agent_id:
                end += 1
            self._send(agent_id, [entries.event_entry(p[1]) for p in prepared[at:end]])
            at = end
        return 0

    def publish(self, event: ev.Event) -> int:
        sent: list[bytes] = []
        if isinstance(event, ev.AgentUpserted):  # the record travels with its first upsert
            sent.append(entries.record_entry(encode_agent(event.agent, whole=True)))
        sent.append(entries.event_entry(self._hub.prepare(event)[1]))
        self._send(event.agent_id, sent)
        return 0

    def _send(self, agent_id: str, sent: list[bytes]) -> None:
        """An event of an agent this node does not own (a sub-agent run of another node's
        requester, an event of no agent) is not this node's to append: dropped, and said."""
        try:
            channel = self._channel(agent_id, False)
        except AgentOwnedElsewhere:
            log.warning("an event of agent %r is not this node's to append: dropped", agent_id)
            return
        channel.send(sent, future=False)
