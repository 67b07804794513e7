"""The daemon assembled: store, hub, manager, gRPC services, health and reflection.

`Daemon` is what `corral serve` runs and what the integration tests start on port 0 with a
temporary state directory and an injected clock. The drain (SIGTERM, SIGINT) is `Daemon.drain`;
its docstring gives the order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import agent_service_pb2_grpc as agent_svc_grpc
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import subagent_service_pb2_grpc as sub_svc_grpc
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server.clock import Clock, SystemClock
from corral_server.domain.events import SubagentRunUpdated
from corral_server.errors import CorralError
from corral_server.hub import RETAIN_BYTES, SUBSCRIBER_WRITES_PER_S, EventHub
from corral_server.listen import (
    make_socket_private,
    remove_socket,
    socket_dir_problem,
    socket_in_use,
    unix_path,
)
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import Timeouts
from corral_server.manager.usage import UsageBook
from corral_server.manager.validate import Limits
from corral_server.mcp import RunWaiters, SubagentTools
from corral_server.mcp.grant import WithMcpServers
from corral_server.metrics import registry_for
from corral_server.metrics_http import serve_metrics
from corral_server.providers import reaping, registry
from corral_server.providers.base import McpServer, Provider
from corral_server.providers.config import ProviderEntry
from corral_server.providers.scripted import ScriptedProvider
from corral_server.reclaim import Reclaimer
from corral_server.records.store import AgentRecords, CreateRequests, EventLog, FinishedTurns
from corral_server.rpc.agent_codec import decode_agent, encode_agent
from corral_server.rpc.agent_service import AgentService
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.bearer import BearerTokens
from corral_server.rpc.connections import ConnectionBook, ConnectionLimit
from corral_server.rpc.convert import encode_event
from corral_server.rpc.event_service import EventServicer
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.rpc.malformed import MalformedRequests
from corral_server.rpc.server_service import ServerService
from corral_server.rpc.streams import StreamBook, StreamLimits
from corral_server.rpc.subagent_service import SubagentService
from corral_server.rpc.timeline_service import TimelineService
from corral_server.rpc.tls import TlsFiles, server_credentials
from corral_server.rpc.turn_service import TurnService
from corral_server.server_info import (
    ServerInfo,
    ServingState,
    access_features,
    corral_version,
    limits_of,
)
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import DB_FILE, Database
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.private import make_private
from corral_server.store.requests import SqliteCreateRequests, SqliteFinishedTurns
from corral_server.store.search import Backfill, SearchIndex
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.store.subagent_runs import SqliteRunStore
from corral_server.store.usage import SqliteUsageLedger
from corral_server.subagents import (
    InMemoryRunStore,
    RunStore,
    SpawnRequest,
    SubagentLimits,
    SubagentRegistry,
)
from corral_server.subagents.codec import decode_run, encode_run
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import TimelineStore

if TYPE_CHECKING:
    from corral_server.mcp.server import McpEndpoint
    from corral_server.web.endpoint import WebEndpoint

log = logging.getLogger(__name__)

_SERVICE_FILES = {
    "AgentService": agent_svc_pb,
    "TurnService": turn_pb,
    "TimelineService": tl_pb,
    "EventService": event_pb,
    "SubagentService": sub_svc_pb,
    "ServerService": server_pb,
}


def _service_descriptor(name: str) -> Any:
    return _SERVICE_FILES[name].DESCRIPTOR.services_by_name[name]


SERVICE_NAMES = (
    agent_svc_pb.DESCRIPTOR.services_by_name["AgentService"].full_name,
    turn_pb.DESCRIPTOR.services_by_name["TurnService"].full_name,
    tl_pb.DESCRIPTOR.services_by_name["TimelineService"].full_name,
    event_pb.DESCRIPTOR.services_by_name["EventService"].full_name,
    sub_svc_pb.DESCRIPTOR.services_by_name["SubagentService"].full_name,
    server_pb.DESCRIPTOR.services_by_name["ServerService"].full_name,
)


@dataclass(frozen=True, slots=True)
class Config:
    # HOST:PORT, or unix:PATH for a Unix socket (made 0600: listen.py).
    listen: str = "127.0.0.1:50051"
    state_dir: Path | None = None
    max_request_bytes: int = 8 * 1024 * 1024
    limits: Limits = field(default_factory=Limits)
    timeouts: Timeouts = field(default_factory=Timeouts)
    retain_events: int = 100_000
    # Frame bytes the event ring retains at most (with retain_events, whichever bound is hit
    # first moves the earliest resumable revision).
    retain_bytes: int = RETAIN_BYTES
    # With a state directory: what the durable event log keeps (resumes and laggards older
    # than the ring catch up from it). None = no limit.
    log_retain_events: int | None = 1_000_000
    log_retain_bytes: int | None = 1 << 30
    # Stream writes per second the hub aims for over all live subscribers under load
    # (hub/pacing.py; BENCHMARKS.md P7 has the measurement); None writes at every commit.
    subscriber_writes_per_s: int | None = SUBSCRIBER_WRITES_PER_S
    # Rows kept per agent timeline (None = all); older rows answer AFTER with `gap`.
    timeline_retain_rows: int | None = None
    # With a state directory: keep the full-text index of the timelines (SearchTimeline).
    # Off by default: indexing in the rows' transaction costs about half the durable write
    # throughput; rows written while off are indexed in the background once it is on.
    search_index: bool = False
    subscriber_buffer_events: int = 8_192
    # Concurrent calls (HTTP/2 streams) one client connection may hold open; more wait in the
    # client until one ends. Bounds what a single connection can pin (subscriptions, turns);
    # a bench or a UI with a few hundred agents on one channel stays under it.
    max_streams_per_connection: int = 256
    # Client connections with corral calls open at once; a call on one more answers
    # RESOURCE_EXHAUSTED / STREAM_LIMIT (rpc/connections.py). grpc itself closes connections
    # past twice this many, idle or not.
    max_connections: int = 1_024
    # Streaming calls (Subscribe, StreamTurn) open at once, and what they hold for clients
    # that do not read (rpc/streams.py: per stream one batch; in total `streams_total_bytes`
    # handed to grpc and not yet written; a write pending for `stream_stall_s` ends its
    # stream with stream_ending and the resume point).
    max_streams: int = StreamLimits().max_streams
    streams_total_bytes: int = StreamLimits().total_bytes
    stream_stall_s: float = StreamLimits().stall_s
    # Drain: how long the daemon keeps answering after health goes NOT_SERVING, so a load
    # balancer's health checks notice before new work is refused (on the daemon's clock).
    drain_delay_s: float = 3.0
    # The providers besides `scripted` (providers/registry.py builds them): `corral serve`
    # passes the built-ins merged with its --config file; the default is scripted only.
    providers: tuple[ProviderEntry, ...] = ()
    # Tests inject providers here; they win over every other of the same name.
    extra_providers: Mapping[str, Provider] = field(default_factory=dict)
    # Access (rpc/auth.py, rpc/tls.py): with a token file every call but health needs a bearer
    # token; with TLS files the listener speaks only TLS (mutual TLS with a client CA).
    auth_token_file: Path | None = None
    tls: TlsFiles | None = None
    reflection: bool = True
    # Started with --standby (said by GetServerInfo; the waiting happens in daemon.py).
    standby: bool = False
    # With a state_dir, timelines and agent records live in its SQLite database (store/) and
    # survive restarts; without one, everything is in memory (tests, benches).
    # False when the caller already holds the state directory's lock (`corral serve` does).
    lock_state_dir: bool = True
    # Serve Prometheus metrics on this HOST:PORT (None: off).
    metrics_listen: str | None = None
    # The metrics endpoint asks for a bearer token of auth_token_file (corral serve: when
    # metrics_listen is not loopback).
    metrics_token: bool = False
    # Sub-agent trees: spawn depth and children limits, announce deferral and retries.
    subagents: SubagentLimits = field(default_factory=SubagentLimits)
    # Serve the sub-agent tools over MCP (streamable HTTP) on this loopback HOST:PORT, each
    # agent with its own token (mcp/); None: off.
    mcp_listen: str | None = None
    # Serve corral.v1 over Connect and gRPC-Web, and the dashboard, on this HOST:PORT (web/);
    # None: off (`corral serve` turns it on, on loopback). Cross-origin pages need their origin
    # listed; calls open at once are capped per client address and in total.
    web_listen: str | None = None
    web_allow_origins: tuple[str, ...] = ()
    web_max_calls_per_client: int = 64
    web_max_calls: int = 1_024
    # The dashboard's files (None: the package's web/static/).
    web_static_dir: Path | None = None


class Daemon:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        # Every agent process carries it (providers/reaping.py); tied to the state directory.
        self.daemon_tag = reaping.daemon_tag(config.state_dir)
        # Without a state directory the event log lives in the hub's memory (a new incarnation
        # each start); `start` replaces the hub with one on the durable log otherwise.
        self.hub = self._hub(None)
        providers = registry.build(config.providers, self.clock)
        for provider in providers.values():
            if isinstance(provider, ScriptedProvider):
                provider.spawner = self._spawn_for_script  # `/spawn`: the sub-agent registry
        providers.update(config.extra_providers)
        if config.mcp_listen:  # real agents' sessions get the MCP tools (mcp/grant.py)
            for name, provider in providers.items():
                if not isinstance(provider, ScriptedProvider):
                    providers[name] = WithMcpServers(provider, self._mcp_servers)
        self._providers = providers
        self.timeline: TimelineStore = InMemoryTimelineStore(
            retain_rows=config.timeline_retain_rows
        )
        self.manager = self._manager(self.timeline, None)
        # Told of every stored run change: wait_for_subagent's waiters (mcp/).
        self.run_waiters = RunWaiters(self.clock)
        self.subagents = self._registry(InMemoryRunStore())
        self.mcp: McpEndpoint | None = None
        self.web: WebEndpoint | None = None
        self.web_port = 0
        # The SQLite database, opened by `start` when the config names a state directory.
        self.database: Database | None = None
        self.search: SearchIndex | None = None  # the full-text index, with a state directory
        self._metrics_server: Any = None
        self.metrics_port = 0
        self._metrics_url = ""
        # Read at construction, so a bad token or certificate file stops the start-up with
        # TokenFileError / TlsFileError before anything binds.
        self.tokens = TokenFile(config.auth_token_file) if config.auth_token_file else None
        self._credentials = server_credentials(config.tls) if config.tls else None
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self._server: grpc.aio.Server | None = None
        # What streaming calls and client connections may hold (rpc/streams.py, connections.py).
        self.connections = ConnectionBook(config.max_connections)
        limits = StreamLimits(
            max_streams=config.max_streams,
            total_bytes=config.streams_total_bytes,
            stall_s=config.stream_stall_s,
        )
        self.streams = StreamBook(limits, self.clock)
        self.port = 0
        # With --listen unix:PATH: the socket's path and inode (removed at the end if ours).
        self._socket: tuple[Path, int] | None = None
        # The drain runs once; later calls await the same one. Setting `_skip_delay` ends its
        # delay early (a second signal, or a caller that asks for no delay).
        self._drain_task: asyncio.Future[None] | None = None
        self._skip_delay = asyncio.Event()

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
        )

    def _manager(
        self,
        timeline: TimelineStore,
        records: AgentRecords | None,
        requests: CreateRequests | None = None,
        finished: FinishedTurns | None = None,
        usage: UsageBook | None = None,
    ) -> AgentManager:
        config = self.config
        return AgentManager(
            providers=self._providers,
            timeline=timeline,
            publisher=self.hub,
            clock=self.clock,
            limits=config.limits,
            timeouts=config.timeouts,
            records=records,
            requests=requests,
            finished=finished,
            daemon_tag=self.daemon_tag,
            usage=usage,
        )

    def _registry(self, store: RunStore) -> SubagentRegistry:
        """The sub-agent registry of the current manager (it sets the manager's hooks)."""
        return SubagentRegistry(
            self.manager, store, self.clock, self.config.subagents, publish=self._run_changed
        )

    def _mcp_servers(self, agent_id: str) -> tuple[McpServer, ...]:
        return () if self.mcp is None else (self.mcp.server_for(agent_id),)

    def _uses_mcp(self, agent_id: str) -> bool:
        """An agent's MCP token opens the tools while the agent is open (never once closed
        or archived)."""
        try:
            return not self.manager.get(agent_id).is_closed
        except CorralError:
            return False

    def _run_changed(self, event: SubagentRunUpdated) -> None:
        self.hub.publish(event)
        self.run_waiters.notify(event)

    async def _spawn_for_script(self, agent_id: str, task: str) -> tuple[str, str]:
        request = SpawnRequest(agent_id, task, expects_completion_message=True)
        run = await self.subagents.spawn(request)
        return run.run_id, run.child_agent_id

    async def _open_store(self, state_dir: Path) -> None:
        """The durable store (issue 6): timelines and agent records in the state directory's
        SQLite database; the stored agents come back (headers only) before anything serves.
        Raises StoreError (a newer schema, an unusable directory) with a clear message."""
        config = self.config
        await asyncio.to_thread(make_private, state_dir, DB_FILE)  # 0700, every file 0600
        self.database = database = await Database.open(state_dir, lock=config.lock_state_dir)
        # The directory's lock is ours: agent processes with its tag are a killed daemon's.
        if reaped := reaping.reap_leftovers(self.daemon_tag, state_dir):
            log.warning(
                "state directory %s: killed %d leftover agent processes", state_dir, len(reaped)
            )
        try:
            self.timeline = await SqliteTimelineStore.open(
                database,
                ITEM_CODEC,
                retain_rows=config.timeline_retain_rows,
                search_index=config.search_index,
            )
            records = await SqliteAgentRecords.open(database, encode_agent, decode_agent)
            loaded = await records.load_headers()
            requests = SqliteCreateRequests(database)
            finished = SqliteFinishedTurns(database)
            event_log = await SqliteEventLog.open(
                database,
                retain_events=config.log_retain_events,
                retain_bytes=config.log_retain_bytes,
            )
            self.hub = self._hub(event_log)  # one journal with the timeline: joint commits
            usage = UsageBook(SqliteUsageLedger(database))
            await usage.open()
            self.manager = self._manager(self.timeline, records, requests, finished, usage)
            runs = await SqliteRunStore.open(database, encode_run, decode_run)
            self.subagents = self._registry(runs)
            await self.subagents.open()  # before the agents: interrupted children end runs
            await self.manager.restore(loaded)
        except BaseException:
            await database.close()
            self.database = None
            raise
        log.info("state directory %s: %d agents restored", state_dir, len(loaded.agents))
        backfill = Backfill(database, ITEM_CODEC.decode)
        self.search = SearchIndex(database, backfill, enabled=config.search_index)
        if config.search_index:
            await backfill.start()  # rows not indexed yet, in the background

    async def start(self) -> int:
        """Open the store (with a state directory), bind and serve; returns the bound port.
        Raises OSError when the port is taken, StoreError when the store cannot open."""
        if self.config.state_dir is not None and self.database is None:
            await self._open_store(self.config.state_dir)
        if not self.subagents.opened:
            await self.subagents.open()
        await self.subagents.recover()
        size = self.config.max_request_bytes
        # The token check runs first: a refused call's body is never decoded.
        auth = [BearerTokens(self.tokens)] if self.tokens else []
        config = self.config
        server = grpc.aio.server(
            interceptors=[
                *auth,
                ConnectionLimit(self.connections),
                MalformedRequests(Reclaimer(self.clock)),
            ],
            options=[
                # A second daemon on the same port must fail to bind, not share the port.
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                ("grpc.max_concurrent_streams", config.max_streams_per_connection),
                # Past this, grpc closes a new connection at once ("Socket closed"): idle
                # connections cannot grow without bound either (ConnectionLimit refuses calls
                # on more than max_connections clearly, well before).
                ("grpc.max_allowed_incoming_connections", 2 * config.max_connections),
                # A client that reads nothing at all, not even pings, is cut after 80 s: its
                # connection and what its streams hold go away with it.
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.keepalive_timeout_ms", 20_000),
            ],
        )
        servicers = self._servicers()
        agent_svc_grpc.add_AgentServiceServicer_to_server(servicers["AgentService"], server)
        turn_grpc.add_TurnServiceServicer_to_server(servicers["TurnService"], server)
        tl_grpc.add_TimelineServiceServicer_to_server(servicers["TimelineService"], server)
        sub_svc_grpc.add_SubagentServiceServicer_to_server(servicers["SubagentService"], server)
        server_grpc.add_ServerServiceServicer_to_server(servicers["ServerService"], server)
        server.add_generic_rpc_handlers((servicers["EventService"].handler(),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        if self.config.reflection:
            reflection.enable_server_reflection(
                (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )
        socket_path = unix_path(self.config.listen)
        if socket_path is not None:
            await self._check_socket_path(socket_path)
        try:
            if self._credentials is not None:
                self.port = server.add_secure_port(self.config.listen, self._credentials)
            else:
                self.port = server.add_insecure_port(self.config.listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.config.listen}: {exc}") from exc
        if self.port == 0:
            raise OSError(f"cannot listen on {self.config.listen}: address in use or invalid")
        if socket_path is not None:  # bound, not yet accepting: no one connects before this
            self._socket = (socket_path, make_socket_private(socket_path))
        await server.start()
        self._server = server
        if self.config.web_listen:
            self.web_port = self._serve_web(self.config.web_listen, servicers)
        if self.config.mcp_listen:
            # The SDK is imported only by a daemon that serves it (mcp/__init__.py says why).
            from corral_server.mcp.server import McpEndpoint

            tools = SubagentTools(self.subagents, self.manager, self.run_waiters)
            self.mcp = McpEndpoint(tools, self.config.mcp_listen, admits=self._uses_mcp)
            await self.mcp.start()
            self.manager.on_closed = self.mcp.agent_closed  # its sessions end with the agent
        if self.config.metrics_listen:
            self.metrics_port = self._serve_metrics(self.config.metrics_listen)
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("corral serving on %s (port %d)", self.config.listen, self.port)
        return self.port

    async def _check_socket_path(self, path: Path) -> None:
        """OSError when the socket's directory could let another user replace it, or when
        another server answers there (grpc would unlink its socket and take the path)."""
        refusal, warning = socket_dir_problem(path)
        if refusal:
            raise OSError(f"cannot listen on {self.config.listen}: {refusal}")
        if warning:
            log.warning("%s", warning)
        if await asyncio.to_thread(socket_in_use, path):
            raise OSError(f"cannot listen on {self.config.listen}: a server answers there")

    def _servicers(self) -> dict[str, Any]:
        """The service implementations, by service name: the gRPC server and the web port
        share these objects."""
        return {
            "AgentService": AgentService(self.manager),
            "TurnService": TurnService(self.manager, self.hub, self.streams),
            "TimelineService": TimelineService(self.manager, self.search),
            "SubagentService": SubagentService(self.subagents),
            "ServerService": ServerService(self.server_info),
            "EventService": EventServicer(
                self.hub,
                self.manager.snapshot,
                max_id_chars=self.config.limits.max_id_chars,
                presence=self.manager.presence,
                clock=self.clock,
                streams=self.streams,
            ),
        }

    def server_info(self) -> ServerInfo:
        """What GetServerInfo answers: asked at each call (the state and the head move)."""
        features = replace(
            access_features(self.config),
            web_url=self.web.url if self.web is not None else "",
            mcp=self.mcp is not None,
            metrics_url=self._metrics_url,
        )
        draining = self._drain_task is not None
        return ServerInfo(
            version=corral_version(),
            state=ServingState.DRAINING if draining else ServingState.SERVING,
            limits=limits_of(self.config),
            providers=tuple(self._providers),
            features=features,
            incarnation=self.hub.incarnation,
            head_revision=self.hub.head_revision,
        )

    def _serve_web(self, listen: str, servicers: Mapping[str, Any]) -> int:
        """corral.v1 over Connect and gRPC-Web, and the dashboard (web/)."""
        from corral_server.asgi_server import Tls
        from corral_server.web.endpoint import WebEndpoint, WebSettings

        config = self.config
        tls = Tls(config.tls.cert, config.tls.key, config.tls.client_ca) if config.tls else None
        settings = WebSettings(
            listen,
            config.max_request_bytes,
            config.web_allow_origins,
            config.web_max_calls_per_client,
            config.web_max_calls,
            tls,
        )
        if config.web_static_dir is not None:
            settings = replace(settings, static_dir=config.web_static_dir)
        descriptors = {name: _service_descriptor(name) for name in servicers}
        by_descriptor = {descriptors[name]: servicer for name, servicer in servicers.items()}
        self.web = WebEndpoint(settings, by_descriptor, self.tokens)
        return self.web.start()

    def _serve_metrics(self, listen: str) -> int:  # on the loop: the collector needs it
        """Prometheus metrics over HTTP on `listen` (threads of their own: metrics_http.py),
        behind the bearer tokens when the config asks for them."""
        host, _, port = listen.rpartition(":")
        loop = asyncio.get_running_loop()
        registry = registry_for(self.manager, self.hub, loop, self.database)
        tokens = self.tokens if self.config.metrics_token else None
        if self.config.metrics_token and tokens is None:
            raise OSError(f"metrics on {listen} need tokens: there is no auth_token_file")
        server = serve_metrics(host.strip("[]"), int(port), registry, tokens)
        self._metrics_server = server
        bound: int = server.server_port
        self._metrics_url = f"http://{host}:{bound}/metrics"
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    async def drain(self, grace_s: float = 10.0, delay_s: float | None = None) -> None:
        """Stop honestly, for a load balancer in front; bounded by the delay plus the grace.

        1. Health goes NOT_SERVING for "" and every service.
        2. Everything is still answered for `delay_s` (default: the config's drain_delay_s),
           waited on the daemon's clock, so balancers notice and send new calls elsewhere.
        3. New work is refused: new turns and creates answer UNAVAILABLE / SHUTTING_DOWN,
           pending WaitForIdle calls end at once with SHUTTING_DOWN.
        4. Every Subscribe stream ends with stream_ending (resume point and incarnation).
        5. The agents shut down and the server stops, both within `grace_s`.

        Runs once: a second call awaits the first (and, with `delay_s` <= 0, cuts its delay).
        """
        delay = self.config.drain_delay_s if delay_s is None else delay_s
        if delay <= 0:
            self._skip_delay.set()
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._drain(grace_s, delay))
        await asyncio.shield(self._drain_task)

    def reload_tokens(self) -> None:
        """Read the token file again (SIGHUP); a bad file keeps the old tokens. Calls still
        open with a token the file dropped end: gRPC's through their registry (rpc/bearer.py),
        the web port's here."""
        if self.tokens is not None and self.tokens.reload() and self.web is not None:
            self.web.calls.cut(self.tokens.holds)

    def skip_drain_delay(self) -> None:
        """End the drain's delay now (a second SIGTERM)."""
        self._skip_delay.set()

    async def _drain(self, grace_s: float, delay_s: float) -> None:
        await self._health.enter_graceful_shutdown()  # 1
        log.info("draining: NOT_SERVING, still answering for %.1fs", delay_s)
        await self._hold(delay_s)  # 2
        self.manager.refuse_new_work()  # 3
        self.hub.end_all("server draining")  # 4
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        try:  # 5
            if self.mcp is not None:
                await asyncio.wait_for(self.mcp.stop(), grace_s)
            await asyncio.wait_for(self.subagents.stop(), grace_s)  # no announce mid-shutdown
            await asyncio.wait_for(self.manager.shutdown(), grace_s)
        except TimeoutError:
            log.warning("agents did not shut down within the %.1fs grace", grace_s)
        if self.web is not None:  # its streams ended with the hub's (step 4)
            left = max(0.1, deadline - loop.time())
            try:
                await asyncio.wait_for(self.web.stop(left * 0.9), left)
            except TimeoutError:
                log.warning("the web port did not stop within the %.1fs grace", grace_s)
            self.web = None
        if self._server is not None:
            await self._server.stop(max(0.0, deadline - loop.time()))
            self._server = None
        if self._socket is not None:
            remove_socket(*self._socket)
            self._socket = None
        if self.search is not None:
            await self.search.backfill.stop()
        if self.database is not None:
            await self.database.close()  # commits what is still queued
            self.database = None
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    async def _hold(self, delay_s: float) -> None:
        """Wait `delay_s` on the daemon's clock, or until the delay is skipped."""
        if delay_s <= 0 or self._skip_delay.is_set():
            return
        sleep = asyncio.ensure_future(self.clock.sleep(delay_s))
        skip = asyncio.ensure_future(self._skip_delay.wait())
        _, pending = await asyncio.wait((sleep, skip), return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
