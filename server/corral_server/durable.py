"""The durable stores of a daemon with a state directory, opened from its SQLite database:
timelines, agent records, CreateAgent request ids, finished turns, the event log and the
sub-agent runs, all in one database so their writes commit together.

Opens and returns them; app.py builds the hub, the manager and the registry on them. Records
are encoded in the store's own format (store/format/); the item codec comes from the rpc edge,
since a stored item is the streamed one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from corral_server.clock import Clock
from corral_server.config import Config
from corral_server.hub.event_hub import new_incarnation
from corral_server.providers import reaping
from corral_server.records.store import LoadedAgents
from corral_server.rpc.forward_relay import Forwarding
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import DB_FILE, Database
from corral_server.store.errors import StoreUnavailable
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.private import make_private
from corral_server.store.requests import SqliteCreateRequests, SqliteFinishedTurns
from corral_server.store.search import Backfill, SearchIndex
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.store.subagent_runs import SqliteRunStore
from corral_server.store.usage import SqliteUsageLedger

if TYPE_CHECKING:
    from corral_server.cluster.node import ClusterNode
    from corral_server.hub import EventHub

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DurableStores:
    timeline: SqliteTimelineStore
    records: SqliteAgentRecords
    loaded: LoadedAgents  # the stored agents, headers only, to restore before serving
    requests: SqliteCreateRequests
    finished: SqliteFinishedTurns
    event_log: SqliteEventLog
    runs: SqliteRunStore
    usage: SqliteUsageLedger  # completed turns' usage (schema v7)


async def open_database(config: Config, state_dir: Path, daemon_tag: str) -> Database:
    """The state directory's database, private (0700, every file 0600), with the agent
    processes a killed daemon left behind stopped. StoreError when it cannot open."""
    await asyncio.to_thread(make_private, state_dir, DB_FILE)
    database = await Database.open(state_dir, lock=config.lock_state_dir)
    # The directory's lock is ours: agent processes with its tag are a killed daemon's.
    if reaped := reaping.reap_leftovers(daemon_tag, state_dir):
        log.warning(
            "state directory %s: killed %d leftover agent processes", state_dir, len(reaped)
        )
    return database


async def open_stores(
    database: Database, config: Config, incarnation: str | None = None
) -> DurableStores:
    """`incarnation`: a cluster node's, the stream's (cluster/node.py), for a new log."""
    timeline = await SqliteTimelineStore.open(
        database,
        ITEM_CODEC,
        retain_rows=config.timeline_retain_rows,
        search_index=config.search_index,
    )
    records = await SqliteAgentRecords.open(database)
    loaded = await records.load_headers()
    event_log = await SqliteEventLog.open(
        database,
        retain_events=config.log_retain_events,
        retain_bytes=config.log_retain_bytes,
        mint=(lambda: incarnation) if incarnation else new_incarnation,
    )
    return DurableStores(
        timeline=timeline,
        records=records,
        loaded=loaded,
        requests=SqliteCreateRequests(database),
        finished=SqliteFinishedTurns(database),
        event_log=event_log,
        runs=await SqliteRunStore.open(database),
        usage=SqliteUsageLedger(database),
    )


async def cluster_node(config: Config, clock: Clock) -> ClusterNode | None:
    """A cluster node's connection to its stream and leases (None: a single daemon). Imported
    here, so a single daemon never loads the NATS client."""
    if config.cluster is None:
        return None
    from corral_server.cluster.node import ClusterNode

    return await ClusterNode.connect(config.cluster, clock)


async def attach_node(
    node: ClusterNode, database: Database, stores: DurableStores, hub: EventHub
) -> ClusterNode:
    """The node following its stream into these stores and this hub, caught up. Raises
    StoreError when the state directory holds the read model of another stream."""
    if stores.event_log.incarnation != node.incarnation:
        await node.stop()
        raise StoreUnavailable(
            database.path,
            f"it holds the events of {stores.event_log.incarnation}, not of the cluster's "
            f"stream {node.incarnation}: a cluster node needs its own state directory",
        )
    try:
        await node.attach(database, stores.timeline, stores.records, hub, ITEM_CODEC)
    except BaseException:
        await node.stop()
        raise
    return node


def forwarding_of(node: ClusterNode) -> Forwarding:
    """How a cluster node forwards the calls that change other nodes' agents: to the lease
    holder (`owner_of`) at the address the node directory has for it."""
    directory = node.directory
    return Forwarding(node.node_id, node.owner_of, directory.address_of, place=directory.place)


async def open_search(database: Database, config: Config) -> SearchIndex:
    """The full-text index; with it on, rows not indexed yet are indexed in the background."""
    backfill = Backfill(database, ITEM_CODEC.decode)
    search = SearchIndex(database, backfill, enabled=config.search_index)
    if config.search_index:
        await backfill.start()
    return search
