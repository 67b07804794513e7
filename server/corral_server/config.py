"""The daemon's configuration (`Config`), and what a configuration says about the daemon it
starts: the limits and access features GetServerInfo reports, which a waiting standby reports
too before it has a daemon.

`corral serve` builds a Config from its flags (serve_flags.py); tests build one directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from corral_server.cluster.settings import ClusterConfig
from corral_server.hub import RETAIN_BYTES, SUBSCRIBER_WRITES_PER_S
from corral_server.manager.specs import Timeouts
from corral_server.manager.validate import Limits
from corral_server.providers.base import Provider
from corral_server.providers.config import ProviderEntry
from corral_server.rpc.forward_relay import Forwarding
from corral_server.rpc.streams import StreamLimits
from corral_server.rpc.tls import TlsFiles
from corral_server.server_info import (
    ServerFeatures,
    ServerInfo,
    ServerLimits,
    ServingState,
    corral_version,
)
from corral_server.subagents.limits import SubagentLimits


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
    # On by default (`--no-search-index` turns it off): indexing in the rows' transaction
    # costs some of the durable write throughput (BENCHMARKS.md, "Full-text search"); rows
    # written while off are indexed in the background once it is on again.
    search_index: bool = True
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
    # The providers file they came from (`--config`): reloaded on SIGHUP and when it changes
    # (config_reload.py); None: nothing to reload.
    config_file: Path | None = None
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
    # Agents' git worktrees (workspace/): where they go (None: the state directory's
    # worktrees/, or beside each repository without a state directory) and the git to run.
    worktrees_dir: Path | None = None
    git_program: str = "git"
    # A cluster node (docs/cluster.md): its events go through the JetStream stream and its
    # state directory holds the read model built from it; None: a single daemon.
    cluster: ClusterConfig | None = None
    # Where other nodes' agents live, for forwarding the calls that change them
    # (rpc/forwarding.py); None: a single daemon, nothing forwarded. Tests inject one; a
    # cluster node's daemon sets its own from the cluster at start.
    forwarding: Forwarding | None = None


def limits_of(config: Config) -> ServerLimits:
    limits = config.limits
    return ServerLimits(
        max_request_bytes=config.max_request_bytes,
        max_prompt_chars=limits.max_prompt_chars,
        max_prompt_bytes=limits.max_prompt_bytes,
        max_content_parts=limits.max_content_parts,
        max_ids_per_request=limits.max_ids,
        max_id_chars=limits.max_id_chars,
        max_labels=limits.max_labels,
        max_streams_per_connection=config.max_streams_per_connection,
    )


def access_features(config: Config) -> ServerFeatures:
    """The features a standby has too: how it is reached (it serves no web, MCP or metrics
    port while it waits)."""
    tls = config.tls
    return ServerFeatures(
        tokens=config.auth_token_file is not None,
        tls=tls is not None,
        mutual_tls=tls is not None and tls.client_ca is not None,
        reflection=config.reflection,
        standby=config.standby,
    )


def standby_info(config: Config, providers: tuple[str, ...]) -> ServerInfo:
    """A waiting standby's answer: the daemon it will become, minus what only runs."""
    return ServerInfo(
        version=corral_version(),
        state=ServingState.STANDBY,
        limits=limits_of(config),
        providers=providers,
        features=access_features(config),
    )
