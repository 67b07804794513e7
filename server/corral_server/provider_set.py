"""The daemon's providers by name, as `corral serve` starts them and as a reloaded `--config`
rebuilds them: the configured ones, the scripted one's `/spawn` wired to the sub-agent
registry, the test-injected ones over them, and with MCP on, every real agent's sessions
offered the daemon's MCP server (mcp/grant.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from corral_server.clock import Clock
from corral_server.config import Config
from corral_server.mcp.grant import WithMcpServers
from corral_server.providers import registry
from corral_server.providers.base import McpServer, Provider
from corral_server.providers.scripted_provider import ScriptedProvider


def build_providers(
    config: Config,
    clock: Clock,
    spawn: Callable[[str, str], Awaitable[tuple[str, str]]],
    mcp_servers: Callable[[str], tuple[McpServer, ...]],
) -> dict[str, Provider]:
    """The providers by name: the scripted one's `/spawn` goes to `spawn`, and with MCP on
    every other one's sessions are offered `mcp_servers`."""
    providers = registry.build(config.providers, clock)
    for provider in providers.values():
        if isinstance(provider, ScriptedProvider):
            provider.spawner = spawn
    providers.update(config.extra_providers)
    if config.mcp_listen:
        for name, provider in providers.items():
            if not isinstance(provider, ScriptedProvider):
                providers[name] = WithMcpServers(provider, mcp_servers)
    return providers
