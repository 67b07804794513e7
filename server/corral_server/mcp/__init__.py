"""corral's sub-agent operations as MCP tools for the agents it runs (docs/mcp.md): an
agent, named by its own token, sees and controls only its own descendants.

Imports nothing. The endpoint (`corral_server.mcp.server.McpEndpoint`) is imported only by a
daemon that serves MCP: the SDK and its web stack take about half a second to import, which
every start-up would otherwise pay (P3 in BENCHMARKS.md)."""
