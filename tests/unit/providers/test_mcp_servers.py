"""Agents are given corral's MCP server where their provider takes one (docs/mcp.md):
ACP's `session/new` `mcpServers` (when the agent offers HTTP), Claude Code's `--mcp-config`
and Codex's `mcp_servers` config, the token in their environment, never on a command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from acp import schema

from corral_server.providers.acp_mcp import acp_servers
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import McpServer, ProviderEvent, SessionConfig
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider, CodexStartFailed

SERVER = McpServer("corral", "http://127.0.0.1:4242/mcp", "agent-1.secret")

# A stub ACP agent: records session/new's params in the file named by argv[1]; argv[2] says
# whether it offers HTTP MCP servers.
ACP_STUB = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["method"] == "initialize":
        caps = {"mcpCapabilities": {"http": sys.argv[2] == "http"}}
        result = {"protocolVersion": 1, "agentCapabilities": caps}
    elif m["method"] == "session/new":
        open(sys.argv[1], "w").write(json.dumps(m["params"]))
        result = {"sessionId": "s1"}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}) + "\\n")
    sys.stdout.flush()
"""

# A stub program that records its argv and environment, then exits (a failed start).
RECORDER = """
import json, os, sys
open(os.environ["RECORD_TO"], "w").write(json.dumps({"argv": sys.argv, "env": dict(os.environ)}))
"""


def ignore(event: ProviderEvent) -> None:
    pass


@pytest.mark.parametrize("offers", ["http", "stdio-only"])
async def test_acp_session_new_carries_the_server_when_the_agent_offers_http(
    tmp_path: Path, offers: str
) -> None:
    stub, seen = tmp_path / "stub.py", tmp_path / "seen.json"
    stub.write_text(ACP_STUB)
    provider = AcpProvider([sys.executable, str(stub), str(seen), offers], dict(os.environ))
    config = SessionConfig("agent-1", str(tmp_path), mcp_servers=(SERVER,))
    session = await provider.create_session(config, ignore)
    await session.close()
    servers = json.loads(seen.read_text())["mcpServers"]
    if offers == "http":
        assert servers == [
            {
                "type": "http",
                "name": "corral",
                "url": SERVER.url,
                "headers": [{"name": "Authorization", "value": "Bearer agent-1.secret"}],
            }
        ]
    else:
        assert servers == []


def test_acp_without_servers_sends_an_empty_list() -> None:
    http = schema.AgentCapabilities(mcp_capabilities=schema.McpCapabilities(http=True))
    assert acp_servers((), http) == []


def test_claude_code_gets_an_mcp_config_whose_token_comes_from_its_environment() -> None:
    provider = ClaudeCodeProvider(["claude"], {})
    argv = provider.command(SessionConfig("agent-1", "/", mcp_servers=(SERVER,)), "sid")
    config = json.loads(argv[argv.index("--mcp-config") + 1])
    assert config == {
        "mcpServers": {
            "corral": {
                "type": "http",
                "url": SERVER.url,
                "headers": {"Authorization": "Bearer ${CORRAL_MCP_TOKEN}"},
            }
        }
    }
    assert not any("secret" in arg for arg in argv)
    assert "--mcp-config" not in provider.command(SessionConfig("agent-1", "/"), "sid")


async def test_codex_gets_mcp_servers_config_and_the_token_in_its_environment(
    tmp_path: Path,
) -> None:
    recorder, record = tmp_path / "recorder.py", tmp_path / "record.json"
    recorder.write_text(RECORDER)
    env = dict(os.environ, RECORD_TO=str(record))
    provider = CodexProvider([sys.executable, str(recorder)], env, request_timeout_s=5)
    config = SessionConfig("agent-1", str(tmp_path), mcp_servers=(SERVER,))
    with pytest.raises(CodexStartFailed):  # the recorder exits instead of serving
        await provider.create_session(config, ignore)
    seen = json.loads(record.read_text())
    assert seen["argv"][1:] == [
        "-c",
        f'mcp_servers.corral.url="{SERVER.url}"',
        "-c",
        'mcp_servers.corral.bearer_token_env_var="CORRAL_MCP_TOKEN"',
        "app-server",
    ]
    assert seen["env"]["CORRAL_MCP_TOKEN"] == "agent-1.secret"
