"""corral's sub-agent operations as MCP tools for the agents it runs (issue 9, item 10): an
agent, named by its own token, sees and controls only its own descendants."""

from corral_server.mcp.server import McpEndpoint
from corral_server.mcp.tokens import AgentTokens
from corral_server.mcp.tools import OutsideTree, SubagentTools
from corral_server.mcp.waiters import RunWaiters

__all__ = ["AgentTokens", "McpEndpoint", "OutsideTree", "RunWaiters", "SubagentTools"]
