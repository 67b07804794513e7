"""Sessions of real agents get corral's MCP tools: a provider wrapped so that every session it
opens carries the daemon's MCP server, with the agent's own token, in its `SessionConfig`
(the adapter then hands it to the agent: providers/mcp_servers.py).

Must not: change anything else about the provider (its name, info, prompts, sessions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from corral_server.domain.content import Prompt
from corral_server.providers.base import (
    EventSink,
    McpServer,
    Provider,
    ProviderInfo,
    ProviderSession,
    SessionConfig,
)


class WithMcpServers:
    def __init__(self, inner: Provider, servers: Callable[[str], tuple[McpServer, ...]]) -> None:
        self._inner = inner
        self._servers = servers  # agent id -> the servers its sessions get

    @property
    def name(self) -> str:
        return self._inner.name

    def info(self) -> ProviderInfo:
        return self._inner.info()

    def validate_prompt(self, prompt: Prompt) -> None:
        self._inner.validate_prompt(prompt)

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ProviderSession:
        servers = (*config.mcp_servers, *self._servers(config.agent_id))
        return await self._inner.create_session(replace(config, mcp_servers=servers), sink)
