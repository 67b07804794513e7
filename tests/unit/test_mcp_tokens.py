"""The MCP endpoint's per-agent tokens: minted for one agent, checked without a table, and
worthless under another daemon's key."""

from __future__ import annotations

from corral_server.mcp.tokens import AgentTokens


def test_a_token_names_the_agent_it_was_minted_for() -> None:
    tokens = AgentTokens()
    assert tokens.agent_of(tokens.token_for("agent-1")) == "agent-1"
    assert tokens.token_for("agent-1") != tokens.token_for("agent-2")


def test_a_token_of_another_key_or_a_changed_agent_is_refused() -> None:
    mine, theirs = AgentTokens(b"k" * 32), AgentTokens(b"x" * 32)
    token = theirs.token_for("agent-1")
    assert mine.agent_of(token) is None
    _, _, mac = mine.token_for("agent-1").partition(".")
    assert mine.agent_of(f"agent-2.{mac}") is None  # another agent's name on a real mac


def test_malformed_tokens_are_refused() -> None:
    tokens = AgentTokens()
    for token in ("", ".", "agent-1", "agent-1.", ".abc", "a.b.c"):
        assert tokens.agent_of(token) is None


def test_a_mac_that_is_not_ascii_is_refused_not_an_error() -> None:
    tokens = AgentTokens()
    for mac in ("\u00e9" * 64, "0" * 63 + "\u00ff", "\udce9", "\u4e2d"):
        assert tokens.agent_of(f"agent-1.{mac}") is None
    assert tokens.agent_of("\udce9.abc") is None  # nor an agent id that is not text
