"""Per-agent credentials for the MCP endpoint: the bearer token that names one agent.

A token is `<agent id>.<HMAC-SHA256 of the agent id>` under a key made at start-up and kept
only in memory: corral mints one for any agent on demand (when it starts the agent's
session) and checks one without a table, and a daemon restart makes every old token
worthless (sessions started after it get new ones).

Must not: write the key anywhere, or accept a token by a comparison that leaks timing. The
comparison is of bytes: a presented MAC may hold any character (a header is decoded as
latin-1), and `hmac.compare_digest` refuses non-ASCII str with a TypeError.
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
        presented = mac.encode("utf-8", "surrogateescape")
        expected = self._mac(agent_id).encode("ascii")
        return agent_id if hmac.compare_digest(presented, expected) else None

    def _mac(self, agent_id: str) -> str:
        name = agent_id.encode("utf-8", "surrogateescape")
        return hmac.new(self._key, name, hashlib.sha256).hexdigest()
