"""The daemon's optional HTTP edges, each on a port of its own: the web port (corral.v1 over
Connect and gRPC-Web, and the dashboard), the MCP tools for the agents corral runs, and
Prometheus metrics. `Edges` owns the three: each starts when the config names its address
(after the gRPC server binds) and stops at its place in the drain's step 5 (app.py gives the
order).

The web stack and the MCP SDK are imported here only when that edge is served: a daemon
without them never pays their import (mcp/__init__.py says how much).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from corral_server.config import Config
from corral_server.errors import CorralError
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.mcp.tools import SubagentTools
from corral_server.mcp.waiters import RunWaiters
from corral_server.metrics import registry_for
from corral_server.metrics_http import serve_metrics
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.services import by_descriptor
from corral_server.server_info import ServerFeatures
from corral_server.store.database import Database
from corral_server.subagents.registry import SubagentRegistry

if TYPE_CHECKING:
    from corral_server.mcp.server import McpEndpoint
    from corral_server.web.endpoint import WebEndpoint

log = logging.getLogger(__name__)


class Edges:
    """The edges a daemon serves. Each is None until started; the web port and metrics are
    None again once stopped (the MCP endpoint stays, stopped)."""

    def __init__(self) -> None:
        self.web: WebEndpoint | None = None
        self.mcp: McpEndpoint | None = None
        self.metrics: MetricsServer | None = None

    def start_web(
        self,
        config: Config,
        servicers: Mapping[str, Any],
        tokens: TokenFile | None,
        rpc_errors: Counter[str],
    ) -> int:
        """corral.v1 over Connect and gRPC-Web, and the dashboard (web/), on `web_listen`;
        the bound port (0: not served)."""
        if not config.web_listen:
            return 0
        self.web = web_endpoint(config, config.web_listen, servicers, tokens, rpc_errors)
        return self.web.start()

    async def start_mcp(
        self,
        config: Config,
        subagents: SubagentRegistry,
        manager: AgentManager,
        waiters: RunWaiters,
    ) -> None:
        """The sub-agent tools over MCP on `mcp_listen`. An agent's token opens them while
        the agent is open (never once it is closed or archived)."""
        if not config.mcp_listen:
            return
        from corral_server.mcp.server import McpEndpoint

        def admits(agent_id: str) -> bool:
            try:
                return not manager.get(agent_id).is_closed
            except CorralError:
                return False

        tools = SubagentTools(subagents, manager, waiters)
        self.mcp = McpEndpoint(tools, config.mcp_listen, admits=admits)
        await self.mcp.start()

    def start_metrics(
        self,
        config: Config,
        manager: AgentManager,
        hub: EventHub,
        database: Database | None,
        tokens: TokenFile | None,
        rpc_errors: Counter[str],
        reloads: Mapping[str, int] | None,
    ) -> int:  # on the loop: the collector needs it
        """Prometheus metrics over HTTP on `metrics_listen` (threads of their own:
        metrics_http.py), behind `tokens` when the config asks for them; the bound port (0:
        not served). OSError when the config asks for tokens and there are none."""
        listen = config.metrics_listen
        if not listen:
            return 0
        if config.metrics_token and tokens is None:
            raise OSError(f"metrics on {listen} need tokens: there is no auth_token_file")
        host, _, port = listen.rpartition(":")
        loop = asyncio.get_running_loop()
        registry = registry_for(manager, hub, loop, database, rpc_errors, reloads)
        guard = tokens if config.metrics_token else None
        server = serve_metrics(host.strip("[]"), int(port), registry, guard)
        bound: int = server.server_port
        log.debug("metrics on http://%s:%d/metrics", host, bound)  # in the start-up line
        self.metrics = MetricsServer(server, bound, f"http://{host}:{bound}/metrics")
        return bound

    def features(self, features: ServerFeatures) -> ServerFeatures:
        """`features` with what the edges serve (GetServerInfo)."""
        return replace(
            features,
            web_url=self.web.url if self.web is not None else "",
            mcp=self.mcp is not None,
            metrics_url=self.metrics.url if self.metrics is not None else "",
        )

    async def stop_mcp(self, grace_s: float) -> None:
        """First of all (no tool call reaches the parts while they stop); bounded by
        `grace_s` (TimeoutError past it)."""
        if self.mcp is not None:
            await asyncio.wait_for(self.mcp.stop(), grace_s)

    async def stop_web(self, left_s: float, grace_s: float) -> None:
        """After the agents: its streams ended with the hub's (the drain's step 4). Within
        `left_s` (at least 0.1 s) of the drain's `grace_s`; a port still stopping past it is
        logged and left."""
        if self.web is None:
            return
        left = max(0.1, left_s)
        try:
            await asyncio.wait_for(self.web.stop(left * 0.9), left)
        except TimeoutError:
            log.warning("the web port did not stop within the %.1fs grace", grace_s)
        self.web = None

    def stop_metrics(self) -> None:
        """Last of all, after the database closed."""
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None


def web_endpoint(
    config: Config,
    listen: str,
    servicers: Mapping[str, Any],
    tokens: TokenFile | None,
    rpc_errors: Counter[str] | None = None,
) -> WebEndpoint:
    """corral.v1 over Connect and gRPC-Web, and the dashboard (web/), not yet started."""
    from corral_server.asgi_server import Tls
    from corral_server.web.endpoint import WebEndpoint, WebSettings

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
    return WebEndpoint(settings, by_descriptor(servicers), tokens, rpc_errors)


@dataclass(frozen=True, slots=True)
class MetricsServer:
    server: Any  # metrics_http's threading HTTP server
    port: int
    url: str

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
