"""How an ACP agent is given MCP servers: `session/new`'s `mcpServers`, HTTP servers with the
token in a header (it reaches the agent over its stdin pipe, never a command line).

Must not: start anything, or know what the servers serve.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from acp import schema

from corral_server.providers.base import McpServer

log = logging.getLogger(__name__)


def acp_servers(
    servers: Sequence[McpServer], capabilities: schema.AgentCapabilities | None
) -> list[schema.HttpMcpServer]:
    """`session/new`'s `mcpServers`: HTTP servers, if the agent says it takes them
    (`agentCapabilities.mcpCapabilities.http`); none otherwise (ACP v1 requires only stdio)."""
    if not servers:
        return []
    caps = capabilities.mcp_capabilities if capabilities is not None else None
    if not (caps is not None and caps.http is True):
        log.info("the agent takes no HTTP MCP servers: it runs without corral's tools")
        return []
    return [
        schema.HttpMcpServer(
            type="http",
            name=s.name,
            url=s.url,
            headers=[schema.HttpHeader(name="Authorization", value=f"Bearer {s.bearer_token}")]
            if s.bearer_token
            else [],
        )
        for s in servers
    ]
