"""How each kind of agent is given MCP servers (`SessionConfig.mcp_servers`): ACP's
`session/new` `mcpServers`, Claude Code's `--mcp-config`, Codex's `mcp_servers` config.

A server's token never goes on a command line (other local users can read those): ACP gets
it over its stdin pipe; Claude Code and Codex read it from an environment variable of their
own process (`token_env`), named in their config.

Must not: start anything, or know what the servers serve.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence

from acp import schema

from corral_server.providers.base import McpServer

log = logging.getLogger(__name__)


def token_env(server: McpServer) -> str:
    """The environment variable that carries the server's token: CORRAL_MCP_TOKEN for
    `corral`."""
    return re.sub(r"[^A-Z0-9]", "_", server.name.upper()) + "_MCP_TOKEN"


def token_environment(servers: Sequence[McpServer]) -> dict[str, str]:
    """What Claude Code's and Codex's process environment gains: each server's token."""
    return {token_env(s): s.bearer_token for s in servers if s.bearer_token}


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


def claude_flags(servers: Sequence[McpServer]) -> list[str]:
    """`--mcp-config JSON`: HTTP servers whose header names the token's variable (Claude Code
    expands `${VAR}` in MCP configs)."""
    if not servers:
        return []
    config: dict[str, object] = {}
    for s in servers:
        entry: dict[str, object] = {"type": "http", "url": s.url}
        if s.bearer_token:
            entry["headers"] = {"Authorization": f"Bearer ${{{token_env(s)}}}"}
        config[s.name] = entry
    return ["--mcp-config", json.dumps({"mcpServers": config})]


def codex_flags(servers: Sequence[McpServer]) -> list[str]:
    """`-c mcp_servers.NAME.url=...` (streamable HTTP) and the token's variable."""
    flags: list[str] = []
    for s in servers:
        flags += ["-c", f"mcp_servers.{s.name}.url={json.dumps(s.url)}"]
        if s.bearer_token:
            flags += ["-c", f"mcp_servers.{s.name}.bearer_token_env_var={json.dumps(token_env(s))}"]
    return flags
