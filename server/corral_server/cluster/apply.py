"""A batch of the stream applied to this node's read model: the local SQLite stores (timelines,
agent records, the event log Subscribe catches up from), the hub, and the read model of the
agents (remote_agents.py). Everything one batch writes is handed to the stores in one
synchronous step with the node's position after it, so the database commits them in one
transaction (store/commits.py) and the hub publishes the batch's events once it has.

Every node applies the same batches in the same order and numbers events from the same start,
so revision r is the same event on every node.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from corral_server.cluster import entries
from corral_server.cluster.log import Batch
from corral_server.cluster.remote_agents import RemoteAgents
from corral_server.hub import EventHub, Prepared
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.cluster_position import ClusterPosition
from corral_server.store.format.agents import decode_agent
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import ItemCodec, NewRow

log = logging.getLogger(__name__)


def node_of(owner: str) -> str:
    """The node of a claim's owner (`node-epoch`, leases.py `Lease.owner`)."""
    return owner.rpartition("-")[0] or owner


@dataclass
class Applier:
    timeline: SqliteTimelineStore
    records: SqliteAgentRecords
    hub: EventHub
    position: ClusterPosition
    codec: ItemCodec
    agents: RemoteAgents

    def apply(self, batch: Batch) -> asyncio.Future[None]:
        agent = batch.agent
        owners: dict[str, str] = {}
        if batch.owner is not None:
            owners[agent] = self.agents.claims[agent] = node_of(batch.owner)
        rows: list[NewRow] = []
        items: list[bytes] = []
        events: list[Prepared] = []
        for entry in batch.events:
            kind = entry[:1]
            if kind == b"R":
                self._row(agent, entry, rows, items)
                continue
            self._rows(agent, rows, items)
            if kind == b"E":
                events.append(Prepared(agent, entry[1:]))
            else:
                self._other(agent, kind, entry)
        self._rows(agent, rows, items)
        if events:
            self.hub.commit_many(events)
        return self.position.put(batch.sequence, owners)

    def _row(self, agent: str, entry: bytes, rows: list[NewRow], items: list[bytes]) -> None:
        row = entries.read_row(entry)
        item = self.codec.decode(row.item)
        rows.append(
            NewRow(item, row.timestamp_ms, row.turn_id, row.provider_message_id, row.output)
        )
        items.append(row.item)
        if len(rows) == 1:
            expected = self._next_seq(agent)
            if row.seq != expected:
                log.error(
                    "agent %s: the stream's row %d lands at %d here", agent, row.seq, expected
                )

    def _next_seq(self, agent: str) -> int:
        try:
            return self.timeline.reserved_next_seq(agent)
        except KeyError:
            return 0

    def _rows(self, agent: str, rows: list[NewRow], items: list[bytes]) -> None:
        if rows:
            self.timeline.append_encoded(agent, list(rows), list(items))
            rows.clear()
            items.clear()

    def _other(self, agent: str, kind: bytes, entry: bytes) -> None:
        if kind == b"A":
            record = decode_agent(entry[1:])
            self.records.put(record)
            self.agents.put(record)
        elif kind == entries.DELETED:
            self.records.delete(agent)
            self.agents.remove(agent)
        elif kind == b"T":
            self.timeline.create_nowait(agent, entry[1:].decode())
        elif kind == b"B":
            self.timeline.rebase_nowait(agent, entry[1:].decode())
        elif kind == entries.DROPPED:
            self.timeline.drop_nowait(agent)
        elif kind == b"P":
            seq, message_id = entries.read_message_id(entry)
            self.timeline.set_provider_message_id_nowait(agent, seq, message_id)
        else:
            log.error("agent %s: an entry of unknown kind %r in the stream, skipped", agent, kind)
