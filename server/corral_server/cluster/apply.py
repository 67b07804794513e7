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
from dataclasses import dataclass, field
from typing import cast

from corral_server.cluster import entries
from corral_server.cluster.log import Batch
from corral_server.cluster.remote_agents import RemoteAgents
from corral_server.domain.agent import Agent
from corral_server.domain.timeline import AssistantMessage
from corral_server.hub import EventHub, Prepared
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.cluster_position import ClusterPosition
from corral_server.store.format.agents import decode_agent
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import ItemCodec, NewRow

log = logging.getLogger(__name__)

_ROW, _EVENT = b"R"[0], b"E"[0]
# An item not decoded (see `Applier._row`): stands in for it in the store's append.
_NOT_READ = AssistantMessage("")
# Prepared's own __new__ is a Python function; the tuple's is C (as in the hub).
_new_prepared = tuple.__new__


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
    _first_seq: int = 0  # the seq the owner gave the first of the rows gathered
    # The agents' records (None: deleted) the batch changed, listed once it is committed.
    _listed: list[tuple[str, Agent | None]] = field(default_factory=list)

    def apply(self, batch: Batch) -> asyncio.Future[None]:
        agent = batch.agent
        owners: dict[str, str] = {}
        if batch.owner is not None:
            owners[agent] = self.agents.claims[agent] = node_of(batch.owner)
        rows: list[NewRow] = []
        items: list[bytes] = []
        events: list[Prepared] = []
        sent = batch.rows
        for index, entry in enumerate(batch.events):
            kind = entry[0]
            if kind == _ROW:
                row = sent[index] if sent is not None else None
                if row is None:
                    self._row(entry, rows, items)
                else:  # this node appended it: the row as its writer had it, not parsed
                    self._sent_row(cast(entries.SentRow, row), rows, items)
            elif kind == _EVENT:
                events.append(_new_prepared(Prepared, (agent, entry[1:])))
            else:
                self._rows(agent, rows, items)
                self._other(agent, entry[:1], entry)
        self._rows(agent, rows, items)
        if events:
            self.hub.commit_many(events)
        done = self.position.put(batch.sequence, owners)
        if self._listed:  # listed once committed, as the hub publishes the batch's events
            listed, self._listed = self._listed, []
            done.add_done_callback(lambda f: None if f.exception() else _list(self.agents, listed))
        return done

    def _row(self, entry: bytes, rows: list[NewRow], items: list[bytes]) -> None:
        seq, row, item = entries.read_new_row(entry, _NOT_READ)
        # The store reads a row's item only to index it or to keep its tool output apart:
        # otherwise it stores the encoded item as it is, and decoding it would be wasted.
        if row.output is not None or self.timeline.search_index:
            row = row._replace(item=self.codec.decode(item))
        if not rows:
            self._first_seq = seq
        rows.append(row)
        items.append(item)

    def _sent_row(self, sent: entries.SentRow, rows: list[NewRow], items: list[bytes]) -> None:
        seq, row, item = sent
        if not rows:
            self._first_seq = seq
        rows.append(row)
        items.append(item)

    def _rows(self, agent: str, rows: list[NewRow], items: list[bytes]) -> None:
        if not rows:
            return
        # The owner numbered the rows; this node's timeline agrees unless something other
        # than the stream changed it.
        try:
            here = self.timeline.reserved_next_seq(agent)
        except KeyError:
            here = 0
        if here != self._first_seq:
            log.error(
                "agent %s: row %d of the stream lands at %d here", agent, self._first_seq, here
            )
        self.timeline.append_encoded(agent, list(rows), list(items))
        rows.clear()
        items.clear()

    def _other(self, agent: str, kind: bytes, entry: bytes) -> None:
        if kind == b"A":
            record = decode_agent(entry[1:])
            self.records.put(record)
            self._listed.append((agent, record))
        elif kind == entries.DELETED:
            self.records.delete(agent)
            self._listed.append((agent, None))
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


def _list(agents: RemoteAgents, changes: list[tuple[str, Agent | None]]) -> None:
    for agent_id, record in changes:
        if record is None:
            agents.remove(agent_id)
        else:
            agents.put(record)
