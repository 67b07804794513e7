"""A corral cluster node (docs/cluster.md): its connection to NATS, the stream and the leases,
the follower that builds its read model, and the channels of the agents it owns.

`connect` opens the stream and the leases' bucket; `attach` starts the follower on the node's
local stores and hub and returns once the read model has caught up with the stream as it was
at the call (the node serves only then). The daemon then builds its manager on `timeline`,
`records` and `publisher`, restores `local(loaded)` and lists the others from `agents`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import nats
import nats.aio.client
import nats.errors
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from corral_server.clock import Clock
from corral_server.cluster.apply import Applier
from corral_server.cluster.channel import AgentChannel, ChannelParts
from corral_server.cluster.follower import Follower
from corral_server.cluster.leases import Holder, Lease, Leases
from corral_server.cluster.leases import decode as decode_lease
from corral_server.cluster.log import EventLog
from corral_server.cluster.node_loss import Adopt, Drop, NodeLoss
from corral_server.cluster.nodes import NodeDirectory, NodeIdTaken, Settings
from corral_server.cluster.remote_agents import RemoteAgents
from corral_server.cluster.replica import ClusterPublisher, ClusterRecords, ClusterTimeline
from corral_server.cluster.settings import ClusterConfig, ClusterStartError
from corral_server.errors import AgentOwnedElsewhere
from corral_server.hub import EventHub
from corral_server.records.store import LoadedAgents
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.cluster_position import ClusterPosition
from corral_server.store.database import Database
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import ItemCodec

log = logging.getLogger(__name__)


class ClusterNode:
    def __init__(
        self,
        config: ClusterConfig,
        clock: Clock,
        client: nats.aio.client.Client,
        event_log: EventLog,
        leases: Leases,
        directory: NodeDirectory,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self.clock = clock
        self.client = client
        self.log = event_log
        self.leases = leases
        self.directory = directory
        self.agents = RemoteAgents(config.node_id)
        self.channels: dict[str, AgentChannel] = {}
        self.leased: dict[str, Holder] = {}  # every lease's latest value (the watch)
        self.node_loss: NodeLoss | None = None  # once watching for lost nodes
        self.follower: Follower | None = None
        self._parts: ChannelParts | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._restored: list[str] = []
        self._stopped = False
        self._watcher: KeyValue.KeyWatcher | None = None
        self.timeline: ClusterTimeline | None = None
        self.records: ClusterRecords | None = None
        self.publisher: ClusterPublisher | None = None
        # Told when the connection to NATS is lost and when it is back (the daemon's health).
        self.on_connection: Callable[[bool], Awaitable[None]] | None = None
        self.connected = True

    async def _connection(self, connected: bool) -> None:
        self.connected = connected
        log.log(
            logging.INFO if connected else logging.WARNING,
            "node %s: NATS %s",
            self.node_id,
            "reconnected" if connected else "disconnected",
        )
        if self.on_connection is not None:
            await self.on_connection(self.serving)

    @property
    def serving(self) -> bool:
        """Connected to NATS, and the read model still follows the stream."""
        return self.connected and (self.follower is None or self.follower.failure is None)

    def _stopped_following(self) -> None:
        if self.on_connection is not None:  # the read model is stale from now on
            self._tasks.append(asyncio.ensure_future(self.on_connection(False)))

    @classmethod
    async def connect(cls, config: ClusterConfig, clock: Clock) -> ClusterNode:
        nodes: list[ClusterNode] = []  # the callbacks' node, once made

        async def disconnected() -> None:
            if nodes:
                await nodes[0]._connection(False)

        async def reconnected() -> None:
            if nodes:
                await nodes[0]._connection(True)

        async def failed(error: Exception) -> None:  # the client retries; said once a try
            log.debug("node %s: NATS: %r", config.node_id, error)

        connecting = nats.connect(
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=failed,
            servers=list(config.urls),
            connect_timeout=2,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
            allow_reconnect=True,
            name=f"corral {config.node_id}",
        )
        try:
            client = await asyncio.wait_for(connecting, config.connect_s)
        except (TimeoutError, OSError, nats.errors.Error) as error:
            urls = ", ".join(config.urls)
            why = f"no NATS server of {urls} answered within {config.connect_s:g} s ({error!r})"
            raise ClusterStartError(why) from None
        try:
            opened = await _opened(client, config, clock)
        except BaseException:
            await client.close()
            raise
        nodes.append(cls(config, clock, client, *opened))
        return nodes[0]

    @property
    def incarnation(self) -> str:
        return self.log.incarnation

    async def attach(
        self,
        database: Database,
        timeline: SqliteTimelineStore,
        records: SqliteAgentRecords,
        hub: EventHub,
        codec: ItemCodec,
    ) -> None:
        """Follow the stream into these local stores and this hub, from where they stopped;
        returns once caught up with the stream's end at the call."""
        position = ClusterPosition(database, self.log.incarnation)
        followed = await position.load()
        self.agents.claims.update(followed.owners)
        applier = Applier(timeline, records, hub, position, codec, self.agents)
        self.follower = Follower(self.log, applier.apply, followed.sequence)
        self.follower.on_failed = self._stopped_following
        self._parts = ChannelParts(
            self.log,
            self.leases,
            self._clock,
            self.follower.applied,
            self.client.max_payload,
            self.follower.appended,
        )
        self.timeline = ClusterTimeline(timeline, codec, self.channel)
        self.records = ClusterRecords(records, self.channel)
        self.publisher = ClusterPublisher(hub, self.channel)
        self._watcher = await self.leases.watch()
        self._tasks.append(asyncio.ensure_future(self._watch(self._watcher)))
        await self.follower.start()
        await self.follower.caught_up()

    def local(self, loaded: LoadedAgents) -> LoadedAgents:
        """The stored agents this node runs (its own by their last claim); the others are
        kept in the read model of other nodes' agents."""
        mine = []
        for agent in loaded.agents:
            if self.agents.claims.get(agent.id) == self.node_id:
                mine.append(agent)
                self.agents.local.add(agent.id)
            else:
                self.agents.put(agent)
        self._restored = [agent.id for agent in mine]
        return LoadedAgents(mine, loaded.bad)

    def adopt(self) -> None:
        """Take the leases of the agents restored here (each channel claims its subject)."""
        for agent_id in self._restored:
            self.channel(agent_id, new=True)

    def channel(self, agent_id: str, new: bool = False) -> AgentChannel:
        """The channel of an agent this node owns. `new`: open it (lease, claim) for an agent
        made here; otherwise an agent without one is another node's: AgentOwnedElsewhere."""
        channel = self.channels.get(agent_id)
        if channel is not None:
            return channel
        if not new:
            raise AgentOwnedElsewhere(agent_id, self.agents.owner(agent_id))
        assert self._parts is not None, "attach first"
        channel = self.channels[agent_id] = AgentChannel(agent_id, self._parts)
        self.agents.local.add(agent_id)
        return channel

    def open_channel(self, agent_id: str, lease: Lease) -> AgentChannel:
        """The channel of an agent taken over with `lease` (node_loss.py); not yet listed
        as this node's."""
        assert self._parts is not None, "attach first"
        channel = self.channels[agent_id] = AgentChannel(agent_id, self._parts, lease)
        return channel

    async def release(self, agent_id: str) -> None:
        """Give an agent up (handed to another node): what waits is appended first, then the
        lease released; it is listed from the read model from now on."""
        channel = self.channels.pop(agent_id, None)
        self.agents.local.discard(agent_id)
        if channel is not None:
            await channel.close()

    def applied(self, sequence: int) -> asyncio.Future[None]:
        """Resolves once the read model applied the stream up to `sequence`."""
        assert self._parts is not None, "attach first"
        return self._parts.applied(sequence)

    def watch_lost(self, adopt: Adopt, drop: Drop) -> None:
        """Take over the agents of lost nodes from now on, and mend broken channels
        (node_loss.py)."""
        self.node_loss = NodeLoss(self, adopt, drop)
        self._tasks.append(asyncio.ensure_future(self.node_loss.run()))

    async def join(self, port: int) -> None:
        """Enter the node directory at the advertised address (port 0 there: `port`, the one
        bound), refreshed with the count of agents this node owns. NodeIdTaken when another
        live process has this node id."""
        host, _, advertised = self.config.advertise.rpartition(":")
        if advertised == "0":
            self.directory.address = f"{host}:{port}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.connect_s
        while True:
            try:
                await self.directory.register(len(self.channels))
                break
            except NodeIdTaken as taken:
                raise ClusterStartError(str(taken)) from None
            except _STARTING as error:  # the bucket's leader still being elected
                if loop.time() >= deadline:
                    why = f"the node directory did not answer: {error!r}"
                    raise ClusterStartError(why) from None
                await asyncio.sleep(0.2)
        self.directory.start(lambda: len(self.channels))

    @property
    def stopping(self) -> bool:
        return self._stopped

    def owner_of(self, agent_id: str) -> str | None:
        """The node a change of the agent goes to; None: this one, or none is known."""
        return self.agents.owner_of(agent_id)

    async def _watch(self, watcher: KeyValue.KeyWatcher) -> None:
        holders = self.agents.holders
        try:
            async for entry in watcher:
                if entry is None:
                    continue
                if entry.operation in (KV_DEL, KV_PURGE):
                    holders.pop(entry.key, None)
                    self.leased.pop(entry.key, None)
                    continue
                with contextlib.suppress(ValueError, KeyError):
                    holder = decode_lease(entry.value, entry.revision or 0)
                    holders[entry.key] = holder.node
                    self.leased[entry.key] = holder
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the watch of the cluster's leases stopped")

    async def stop(self) -> None:
        """Leave the directory, give up the leases, stop following, close the connection
        (once: a second call does nothing)."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            await self.directory.leave()
        await asyncio.gather(*(channel.close() for channel in self.channels.values()))
        if self.follower is not None:
            await self.follower.stop()
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()  # type: ignore[no-untyped-call]
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self.client.close()


# What a fresh NATS cluster answers while its streams and buckets elect their leaders.
_STARTING = (TimeoutError, nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError)


async def _opened(
    client: nats.aio.client.Client, config: ClusterConfig, clock: Clock
) -> tuple[EventLog, Leases, NodeDirectory]:
    """The stream, the leases and the node directory, made when missing. Tried again while
    the cluster is still electing leaders (several nodes starting together on a fresh
    cluster), for `connect_s`; then ClusterStartError."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.connect_s
    while True:
        try:
            return await _open_parts(client, config, clock)
        except (*_STARTING, nats.js.errors.NoStreamResponseError) as error:
            if loop.time() >= deadline:
                why = f"the NATS cluster did not answer within {config.connect_s:g} s ({error!r})"
                raise ClusterStartError(why) from None
            await asyncio.sleep(0.2)


async def _open_parts(
    client: nats.aio.client.Client, config: ClusterConfig, clock: Clock
) -> tuple[EventLog, Leases, NodeDirectory]:
    js = client.jetstream()
    event_log = await EventLog.open(js, config.stream, config.replicas, prefix=config.prefix)
    leases = await Leases.open(
        js,
        config.node_id,
        clock,
        config.leases_bucket,
        config.replicas,
        config.lease_ms,
        config.skew_ms,
    )
    settings = Settings(config.nodes_bucket, config.replicas, config.lease_ms, config.skew_ms)
    directory = await NodeDirectory.open(js, config.node_id, config.advertise, clock, settings)
    return event_log, leases, directory
