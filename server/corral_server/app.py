"""The daemon assembled: the providers, hub, manager and sub-agent registry (on the durable
stores with a state directory), wired to each other, behind the gRPC server and the optional
HTTP edges (edges.py).

`Daemon` is what `corral serve` runs and what the integration tests start on port 0 with a
temporary state directory and an injected clock. The drain (SIGTERM, SIGINT) is `Daemon.drain`;
drain.py gives the order. The parts are built by their own modules (config.py,
durable.py, rpc/server.py, rpc/services.py, edges.py); the wiring between them (which
callback of one part another part calls) is set here and only here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpc_health.v1 import health

from corral_server import edges
from corral_server.clock import Clock, SystemClock
from corral_server.config import Config, access_features, limits_of
from corral_server.config_reload import reloader_for
from corral_server.domain.events import Event, SubagentRunUpdated
from corral_server.drain import Drain
from corral_server.durable import (
    DurableStores,
    attach_node,
    cluster_node,
    forwarding_of,
    open_database,
    open_search,
    open_stores,
)
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import Defaults
from corral_server.manager.usage import UsageBook
from corral_server.mcp.waiters import RunWaiters
from corral_server.provider_set import build_providers
from corral_server.providers import reaping
from corral_server.providers.base import McpServer, Provider
from corral_server.providers.config import ProviderEntry
from corral_server.reclaim import Reclaimer
from corral_server.records.memory import InMemoryRunStore
from corral_server.records.store import EventLog, RunStore
from corral_server.rpc import server as grpc_server
from corral_server.rpc.agent_service import ReloadOn
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.connections import ConnectionBook
from corral_server.rpc.convert import encode_event
from corral_server.rpc.forwarding import ForwardCalls, Forwarder, forwarding_servicers
from corral_server.rpc.server import SERVICE_NAMES
from corral_server.rpc.services import CLUSTER_RESUME_WAIT_S, build_servicers
from corral_server.rpc.streams import StreamBook, StreamLimits
from corral_server.rpc.tls import server_credentials
from corral_server.rpc.wire import row_appended_batch
from corral_server.schedules.scheduler import Scheduler
from corral_server.schedules.store import SqliteSchedules
from corral_server.server_info import ServerInfo, ServingState, corral_version
from corral_server.store.database import Database
from corral_server.store.search import SearchIndex
from corral_server.subagents.limits import SpawnRequest
from corral_server.subagents.registry import SubagentRegistry
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import TimelineStore
from corral_server.workspace.changes import Changes
from corral_server.workspace.trees import Trees
from corral_server.workspace.turn_trees import TurnTrees, WatchedPublisher
from corral_server.workspace.worktrees import worktrees_for

if TYPE_CHECKING:
    from corral_server.cluster.node import ClusterNode
    from corral_server.mcp.server import McpEndpoint
    from corral_server.web.endpoint import WebEndpoint

__all__ = ["SERVICE_NAMES", "Config", "Daemon"]

log = logging.getLogger(__name__)


class Daemon:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        # Every agent process carries it (providers/reaping.py); tied to the state directory.
        self.daemon_tag = reaping.daemon_tag(config.state_dir)
        self.cluster: ClusterNode | None = None  # with --cluster: this node (cluster/node.py)
        # Without a state directory the event log lives in the hub's memory (a new incarnation
        # each start); `start` replaces the hub with one on the durable log otherwise.
        self.hub = self._hub(None)
        self._providers = self._build_providers(config.providers)
        self.timeline: TimelineStore = InMemoryTimelineStore(
            retain_rows=config.timeline_retain_rows
        )
        self.worktrees = worktrees_for(config.worktrees_dir, config.state_dir, config.git_program)
        # Working trees at turns' edges, and changes_updated after each turn (workspace/).
        self.turn_trees = TurnTrees(
            Trees(self.worktrees.git), lambda agent_id: self.manager.get(agent_id), self.hub_publish
        )
        self.manager = self._manager(self.timeline, None)
        # Schedules (schedules/): in memory until `start` opens the state directory.
        self.scheduler = Scheduler(self.clock, lambda: self.manager, self.hub_publish)
        # Told of every stored run change: wait_for_subagent's waiters (mcp/).
        self.run_waiters = RunWaiters(self.clock)
        self.subagents = self._registry(InMemoryRunStore())
        # `--config` reloaded on SIGHUP and when the file changes (config_reload.py).
        self.config_reload = reloader_for(
            config, self.clock, self._build_providers, self._providers, lambda: self.manager
        )
        self.edges = edges.Edges()  # web, MCP, metrics: started once gRPC serves
        self.web_port = self.metrics_port = 0  # their bound ports (0: not served)
        # The SQLite database, opened by `start` when the config names a state directory.
        self.database: Database | None = None
        self.search: SearchIndex | None = None  # the full-text index, with a state directory
        # Read at construction, so a bad token or certificate file stops the start-up with
        # TokenFileError / TlsFileError before anything binds.
        self.tokens = TokenFile(config.auth_token_file) if config.auth_token_file else None
        self._credentials = server_credentials(config.tls) if config.tls else None
        self._health = health.aio.HealthServicer()
        self._server: grpc_server.Listening | None = None
        # What streaming calls and client connections may hold (rpc/streams.py, connections.py).
        self.connections = ConnectionBook(config.max_connections)
        self.streams = _stream_book(config, self.clock)
        # This daemon's calls answered with an error, by status code (both edges; metrics).
        self.rpc_errors: Counter[str] = Counter()
        self.port = 0
        # Calls that change another node's agent go there (rpc/forwarding.py); set before
        # `start` to forward with a cluster's own look-ups.
        self.forwarder = Forwarder(config.forwarding) if config.forwarding else None
        self._drain = Drain(
            self.clock,
            not_serving=self._health.enter_graceful_shutdown,
            refuse_new_work=self._refuse_new_work,
            stop=self._stop,
        )

    # --- the parts and their wiring --------------------------------------------------------

    def _build_providers(self, entries: tuple[ProviderEntry, ...]) -> dict[str, Provider]:
        config = replace(self.config, providers=entries)
        return build_providers(config, self.clock, self._spawn_for_script, self._mcp_servers)

    def _hub(self, event_log: EventLog | None) -> EventHub:
        config = self.config
        return EventHub(
            encode_event,
            retain_events=config.retain_events,
            retain_bytes=config.retain_bytes,
            buffer_events=config.subscriber_buffer_events,
            writes_per_s=config.subscriber_writes_per_s,
            log=event_log,
            joint_commits=event_log is not None,
            log_clock=self.clock,
            encode_rows=row_appended_batch,
        )

    def _manager(self, timeline: TimelineStore, stores: DurableStores | None) -> AgentManager:
        config = self.config
        node = self.cluster
        publisher = node.publisher if node and node.publisher else self.hub
        return AgentManager(
            providers=self._providers,
            timeline=timeline,
            publisher=WatchedPublisher(publisher, self.turn_trees.observe),
            clock=self.clock,
            limits=config.limits,
            timeouts=config.timeouts,
            records=(node.records if node else stores.records) if stores else None,
            requests=stores.requests if stores else None,
            finished=stores.finished if stores else None,
            daemon_tag=self.daemon_tag,
            worktrees=self.worktrees,
            usage=UsageBook(stores.usage) if stores else None,
            defaults={e.name: Defaults(e.model, e.mode) for e in config.providers},
            remote=node.agents if node else None,
        )

    def _registry(self, store: RunStore) -> SubagentRegistry:
        """The sub-agent registry of the current manager, set as the manager's hooks."""
        registry = SubagentRegistry(
            self.manager, store, self.clock, self.config.subagents, publish=self._run_changed
        )
        self.manager.hooks.on_settled = registry.on_settled
        self.manager.hooks.on_archive = registry.on_archive
        return registry

    def _mcp_servers(self, agent_id: str) -> tuple[McpServer, ...]:
        return () if self.mcp is None else (self.mcp.server_for(agent_id),)

    def hub_publish(self, event: Event) -> int:
        # The current hub (`start` may replace it); a cluster node's events go to the stream.
        publisher = self.cluster.publisher if self.cluster else None
        return (publisher or self.hub).publish(event)

    def _run_changed(self, event: SubagentRunUpdated) -> None:
        self.hub_publish(event)
        self.run_waiters.notify(event)

    async def _spawn_for_script(self, agent_id: str, task: str) -> tuple[str, str]:
        request = SpawnRequest(agent_id, task, expects_completion_message=True)
        run = await self.subagents.spawn(request)
        return run.run_id, run.child_agent_id

    # --- start -----------------------------------------------------------------------------

    async def _open_store(self, state_dir: Path) -> None:
        """The store (docs/design.md#durability): timelines and agent records in the state
        directory's SQLite database; the stored agents come back (headers only) before
        anything serves. Raises StoreError (a newer schema, an unusable directory) with a clear
        message."""
        self.database = database = await open_database(self.config, state_dir, self.daemon_tag)
        node = None
        try:
            node = await cluster_node(self.config, self.clock)  # a cluster node: its stream
            stores = await open_stores(database, self.config, node.incarnation if node else None)
            self.timeline = stores.timeline
            self.hub = self._hub(stores.event_log)  # one journal with the timeline: joint commits
            if node is not None:  # the read model caught up with the stream (docs/cluster.md)
                self.cluster = await attach_node(node, database, stores, self.hub)
                self.timeline = node.timeline or self.timeline
                self.forwarder = self.forwarder or Forwarder(forwarding_of(node))
            self.manager = self._manager(self.timeline, stores)
            await self.manager.usage.open()  # the counters from the ledger
            self.subagents = self._registry(stores.runs)
            await self.subagents.open()  # before the agents: interrupted children end runs
            loaded = node.local(stores.loaded) if node else stores.loaded
            if node is not None:  # the leases first: restoring may write (an interrupted turn)
                node.adopt()
            await self.manager.restore(loaded)
            if node is not None:  # from now on, agents of lost nodes are taken over here
                node.watch_lost(self.manager.adopt, self.manager.drop)
            self.scheduler.store = SqliteSchedules(database)
            await self.scheduler.load()
        except BaseException:
            if node is not None:
                await node.stop()
            await database.close()
            self.database = None
            raise
        # At DEBUG: the start-up line (startup_line.py) says it once the daemon serves.
        log.debug("state directory %s: %d agents restored", state_dir, len(stores.loaded.agents))
        self.search = await open_search(database, self.config)

    def _reload_on(self) -> ReloadOn | None:
        """A cluster node's ReloadAgent, which may restart the agent on another node."""
        if self.cluster is None:
            return None
        from corral_server.cluster.relocation import Relocation

        return Relocation(self.cluster, self.manager).reload

    async def start(self) -> int:
        """Open the store (with a state directory), bind and serve; returns the bound port.
        Raises OSError when the port is taken, StoreError when the store cannot open."""
        if self.config.cluster is not None and self.config.state_dir is None:
            raise ValueError("a cluster node needs a state directory: it holds its read model")
        if self.config.state_dir is not None and self.database is None:
            await self._open_store(self.config.state_dir)
        if not self.subagents.opened:
            await self.subagents.open()
        await self.subagents.recover()
        servicers = build_servicers(
            manager=self.manager,
            hub=self.hub,
            subagents=self.subagents,
            streams=self.streams,
            search=self.search,
            server_info=self.server_info,
            clock=self.clock,
            worktrees=self.worktrees,
            changes=Changes(self.turn_trees.trees, self.turn_trees),
            scheduler=self.scheduler,
            resume_wait_s=CLUSTER_RESUME_WAIT_S if self.cluster is not None else 0.0,
            reload_on=self._reload_on(),
        )
        await self._serve_grpc(servicers)
        if self.cluster is not None:
            await self.cluster.join(self.port)  # in the node directory, at its address
        await self._serve_edges(servicers)
        await grpc_server.set_serving(self._health, True)
        if self.cluster is not None:  # NOT_SERVING while cut off from NATS
            self.cluster.on_connection = partial(grpc_server.set_serving, self._health)
        self.scheduler.start()  # after serving: a missed firing runs once now
        if self.config_reload is not None:
            await self.config_reload.start()
        log.debug("corral serving on %s (port %d)", self.config.listen, self.port)
        return self.port

    async def _serve_grpc(self, servicers: dict[str, Any]) -> None:
        config = self.config
        server = grpc_server.build_server(
            tokens=self.tokens,
            connections=self.connections,
            rpc_errors=self.rpc_errors,
            reclaimer=Reclaimer(self.clock),
            max_request_bytes=config.max_request_bytes,
            max_streams_per_connection=config.max_streams_per_connection,
            max_connections=config.max_connections,
            forward=ForwardCalls(self.forwarder) if self.forwarder is not None else None,
        )
        grpc_server.add_services(server, servicers, self._health, config.reflection)
        self._server = await grpc_server.listen_on(server, config.listen, self._credentials)
        self.port = self._server.port
        if self._server.warning:
            log.warning("%s", self._server.warning)

    async def _serve_edges(self, servicers: dict[str, Any]) -> None:
        config, tokens, errors = self.config, self.tokens, self.rpc_errors
        if self.forwarder is not None:  # the web edge calls the servicers directly
            servicers = forwarding_servicers(servicers, self.forwarder)
        self.web_port = self.edges.start_web(config, servicers, tokens, errors)
        await self.edges.start_mcp(config, self.subagents, self.manager, self.run_waiters)
        if self.mcp is not None:
            self.manager.hooks.on_closed = self.mcp.agent_closed  # its sessions end with the agent
        reloads = self.config_reload.counts if self.config_reload is not None else None
        self.metrics_port = self.edges.start_metrics(
            config, self.manager, self.hub, self.database, tokens, errors, reloads
        )

    @property
    def web(self) -> WebEndpoint | None:
        return self.edges.web

    @property
    def mcp(self) -> McpEndpoint | None:
        return self.edges.mcp

    def server_info(self) -> ServerInfo:
        """What GetServerInfo answers: asked at each call (the state and the head move)."""
        features = self.edges.features(access_features(self.config))
        return ServerInfo(
            version=corral_version(),
            state=ServingState.DRAINING if self._drain.started else ServingState.SERVING,
            limits=limits_of(self.config),
            providers=tuple(self._providers),
            features=features,
            incarnation=self.hub.incarnation,
            head_revision=self.hub.head_revision,
        )

    # --- drain -----------------------------------------------------------------------------

    async def drain(self, grace_s: float = 10.0, delay_s: float | None = None) -> None:
        """Stop honestly, for a load balancer in front (drain.py numbers the steps); bounded
        by `delay_s` (default: the config's drain_delay_s) plus `grace_s`. Runs once: a second
        call awaits the first (and, with `delay_s` <= 0, cuts its delay)."""
        delay = self.config.drain_delay_s if delay_s is None else delay_s
        await self._drain.run(grace_s, delay)

    def reload_tokens(self) -> None:
        """Read the token file again (SIGHUP); a bad file keeps the old tokens. Calls still
        open with a token the file dropped end: gRPC's through their registry (rpc/bearer.py),
        the web port's here."""
        if self.tokens is not None and self.tokens.reload() and self.web is not None:
            self.web.calls.cut(self.tokens.holds)

    def on_sighup(self) -> None:
        """SIGHUP: the token file and the providers file are read again."""
        self.reload_tokens()
        if self.config_reload is not None:
            self.config_reload.request("SIGHUP")

    def skip_drain_delay(self) -> None:
        """End the drain's delay now (a second SIGTERM)."""
        self._drain.skip_delay()

    def _refuse_new_work(self) -> None:  # the drain's steps 3 and 4
        self.manager.refuse_new_work()
        self.scheduler.stop()
        self.hub.end_all("server draining")

    async def _stop(self, grace_s: float) -> None:
        """The drain's step 5: every part stops, within `grace_s`."""
        if self.config_reload is not None:
            await self.config_reload.stop()  # no reload mid-shutdown
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        try:
            await self.edges.stop_mcp(grace_s)
            await asyncio.wait_for(self.subagents.stop(), grace_s)  # no announce mid-shutdown
            await asyncio.wait_for(self.manager.shutdown(), grace_s)
            # Firings and tree captures under way finish (each git call has its deadline).
            await asyncio.wait_for(self.scheduler.settled(), grace_s)
            await asyncio.wait_for(self.turn_trees.settled(), grace_s)
        except TimeoutError:
            log.warning("agents did not shut down within the %.1fs grace", grace_s)
        await self.edges.stop_web(deadline - loop.time(), grace_s)
        if self._server is not None:  # and with unix:PATH, its socket removed
            await self._server.stop(max(0.0, deadline - loop.time()))
            self._server = None
        if self.forwarder is not None:
            await self.forwarder.relay.close()
        if self.search is not None:
            await self.search.backfill.stop()
        if self.cluster is not None:
            await self.cluster.stop()  # its leases given up, the follower stopped
        if self.database is not None:
            await self.database.close()  # commits what is still queued
            self.database = None
        self.edges.stop_metrics()

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.server.wait_for_termination()


def _stream_book(config: Config, clock: Clock) -> StreamBook:
    limits = StreamLimits(
        max_streams=config.max_streams,
        total_bytes=config.streams_total_bytes,
        stall_s=config.stream_stall_s,
    )
    return StreamBook(limits, clock)
