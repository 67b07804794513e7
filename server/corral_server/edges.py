"""The daemon's optional HTTP edges, each on a port of its own: the web port (corral.v1 over
Connect and gRPC-Web, and the dashboard), the MCP tools for the agents corral runs, and
Prometheus metrics.

The web stack and the MCP SDK are imported here only when that edge is served: a daemon
without them never pays their import (mcp/__init__.py says how much).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from corral_server.config import Config
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.mcp.tools import SubagentTools
from corral_server.mcp.waiters import RunWaiters
from corral_server.metrics import registry_for
from corral_server.metrics_http import serve_metrics
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.services import by_descriptor
from corral_server.store.database import Database
from corral_server.subagents.registry import SubagentRegistry

if TYPE_CHECKING:
    from corral_server.mcp.server import McpEndpoint
    from corral_server.web.endpoint import WebEndpoint

log = logging.getLogger(__name__)


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


async def start_mcp(
    listen: str,
    subagents: SubagentRegistry,
    manager: AgentManager,
    waiters: RunWaiters,
    admits: Callable[[str], bool],
) -> McpEndpoint:
    """The sub-agent tools over MCP, started; `admits` says whose token still opens them."""
    from corral_server.mcp.server import McpEndpoint

    endpoint = McpEndpoint(SubagentTools(subagents, manager, waiters), listen, admits=admits)
    await endpoint.start()
    return endpoint


@dataclass(frozen=True, slots=True)
class MetricsServer:
    server: Any  # metrics_http's threading HTTP server
    port: int
    url: str

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_metrics(
    listen: str,
    manager: AgentManager,
    hub: EventHub,
    database: Database | None,
    tokens: TokenFile | None,
    rpc_errors: Counter[str] | None = None,
    *,
    needs_tokens: bool = False,
    reloads: Mapping[str, int] | None = None,
) -> MetricsServer:  # on the loop: the collector needs it
    """Prometheus metrics over HTTP on `listen` (threads of their own: metrics_http.py),
    behind `tokens` when given. OSError when `needs_tokens` and there are none."""
    if needs_tokens and tokens is None:
        raise OSError(f"metrics on {listen} need tokens: there is no auth_token_file")
    host, _, port = listen.rpartition(":")
    loop = asyncio.get_running_loop()
    registry = registry_for(manager, hub, loop, database, rpc_errors, reloads)
    server = serve_metrics(host.strip("[]"), int(port), registry, tokens)
    bound: int = server.server_port
    log.debug("metrics on http://%s:%d/metrics", host, bound)  # in the start-up line
    return MetricsServer(server, bound, f"http://{host}:{bound}/metrics")
