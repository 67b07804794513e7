"""How each kind of agent is given MCP servers (`SessionConfig.mcp_servers`): Claude Code's
`--mcp-config`, Codex's `mcp_servers` config (ACP's `session/new` `mcpServers` are built in
`acp_mcp.py`, beside the ACP SDK this module must not load).

A server's token never goes on a command line (other local users can read those): ACP gets
it over its stdin pipe; Claude Code and Codex read it from an environment variable of their
own process (`token_env`), named in their config.

Must not: start anything, or know what the servers serve.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from corral_server.providers.base import McpServer


def token_env(server: McpServer) -> str:
    """The environment variable that carries the server's token: CORRAL_MCP_TOKEN for
    `corral`."""
    return re.sub(r"[^A-Z0-9]", "_", server.name.upper()) + "_MCP_TOKEN"


def token_environment(servers: Sequence[McpServer]) -> dict[str, str]:
    """What Claude Code's and Codex's process environment gains: each server's token."""
    return {token_env(s): s.bearer_token for s in servers if s.bearer_token}


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
