"""Per-agent credentials for the MCP endpoint: the bearer token that names one agent.

A token is `<agent id>.<HMAC-SHA256 of the agent id>` under a key made at start-up and kept
only in memory: corral mints one for any agent on demand (when it starts the agent's
session) and checks one without a table, and a daemon restart makes every old token
worthless (sessions started after it get new ones).

Must not: write the key anywhere, or accept a token by a comparison that leaks timing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets


class AgentTokens:
    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def token_for(self, agent_id: str) -> str:
        return f"{agent_id}.{self._mac(agent_id)}"

    def agent_of(self, token: str) -> str | None:
        """The agent a token was minted for, or None for anything else."""
        agent_id, dot, mac = token.rpartition(".")
        if not dot or not agent_id:
            return None
        return agent_id if hmac.compare_digest(mac, self._mac(agent_id)) else None

    def _mac(self, agent_id: str) -> str:
        return hmac.new(self._key, agent_id.encode(), hashlib.sha256).hexdigest()
