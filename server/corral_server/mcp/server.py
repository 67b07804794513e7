"""The MCP endpoint: corral's sub-agent tools over the SDK's streamable HTTP transport, on a
loopback port of its own (`corral serve --mcp-listen HOST:PORT`).

One endpoint, `/mcp`, for every agent; the caller is named by its bearer token
(`Authorization: Bearer <token>`, tokens.py), checked before the SDK sees the request. The
checked agent rides the request as the SDK's `AuthenticatedUser` (client id = agent id), so
the SDK binds each MCP session to the credential that opened it, and every tool call reads
its caller from its own HTTP request (never from the session). When an agent closes,
`agent_closed` ends what it has open: its requests in flight are cut and its sessions deleted
(sessions.py).

Steps of a tool call:
1. `_AgentAuth`: no token, one corral did not mint, or one of an agent that is closed or
   archived (`admits` says which may) -> HTTP 401, nothing else runs;
2. the SDK decodes the call and validates its arguments against the tool's schema;
3. the tool asks `SubagentTools` (tools.py) as that agent: a run or agent outside its tree,
   or any domain error, comes back as an MCP tool error (`isError`) with the message.

Must not: import grpc; install signal handlers (the daemon owns SIGTERM/SIGINT: uvicorn's are
switched off); log tokens.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from corral_server import errors
from corral_server.asgi_server import AsgiServer
from corral_server.domain.timeline import JsonObject
from corral_server.mcp.sessions import AgentRequests
from corral_server.mcp.tokens import AgentTokens
from corral_server.mcp.tools import SubagentTools
from corral_server.providers.base import McpServer

log = logging.getLogger(__name__)

PATH = "/mcp"
# The name agents know the server by (their tools show as e.g. `mcp__corral__spawn_subagent`).
SERVER_NAME = "corral"
# How long open MCP streams (an agent's GET stream) may keep the endpoint from stopping.
STOP_GRACE_S = 1.0

INSTRUCTIONS = (
    "corral runs you. These tools let you spawn sub-agents that work on a task in parallel "
    "and report back, and see, wait for, steer, stop and answer the permission requests of "
    "the sub-agents you spawned (and theirs), never anyone else's."
)


def build_server(tools: SubagentTools) -> MCPServer:
    """The SDK server with the six tools, each answering as the caller its request names."""
    # No subscriptions/listen: nothing to notify of, and no stream held open that a stop
    # would have to cut.
    server: MCPServer = MCPServer(
        SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING", subscriptions=False
    )
    _add_run_tools(server, tools)
    _add_control_tools(server, tools)
    return server


def _add_run_tools(server: MCPServer, tools: SubagentTools) -> None:
    """The tools that start runs and read them: spawn, list, wait."""

    @server.tool()
    async def spawn_subagent(
        task: Annotated[str, Field(description="what the sub-agent should do: its first prompt")],
        ctx: Context,
        label: Annotated[str, Field(description="a short name for the run")] = "",
        provider: Annotated[str, Field(description="the kind of agent; default: yours")] = "",
        wake_on_completion: Annotated[
            bool,
            Field(description="true: when the run ends you get a new turn with its result"),
        ] = False,
    ) -> dict[str, Any]:
        """Spawn a sub-agent working on `task`; returns its run (run_id, child_agent_id)."""
        return await _answer(tools.spawn(_caller(ctx), task, label, provider, wake_on_completion))

    @server.tool()
    async def list_subagents(
        ctx: Context,
        active_only: Annotated[bool, Field(description="only runs still running")] = False,
    ) -> dict[str, Any]:
        """Your sub-agent runs and theirs (breadth first), with state, outcome, result and
        pending permission requests."""
        return await _answer(tools.list_runs(_caller(ctx), active_only))

    @server.tool()
    async def wait_for_subagent(
        run_id: str,
        ctx: Context,
        timeout_s: Annotated[float, Field(description="give up waiting after this long")] = 300,
    ) -> dict[str, Any]:
        """Wait until the run ends and return it with its result (state "ended"); after
        `timeout_s` the run as it is (state "running")."""
        return await _answer(tools.wait(_caller(ctx), run_id, timeout_s))


def _add_control_tools(server: MCPServer, tools: SubagentTools) -> None:
    """The tools that act on a running run: steer, kill, answer its permission requests."""

    @server.tool()
    async def steer_subagent(run_id: str, message: str, ctx: Context) -> dict[str, Any]:
        """Interrupt the run and restart its sub-agent on `message`; returns the new run."""
        return await _answer(tools.steer(_caller(ctx), run_id, message))

    @server.tool()
    async def kill_subagent(
        run_id: str,
        ctx: Context,
        cascade: Annotated[bool, Field(description="also every run below it")] = True,
    ) -> dict[str, Any]:
        """Stop the run (and with `cascade` its whole subtree); returns the killed run ids."""
        return await _answer(tools.kill(_caller(ctx), run_id, cascade))

    @server.tool()
    async def answer_subagent_permission(
        agent_id: Annotated[str, Field(description="the sub-agent (child_agent_id) that asks")],
        request_id: Annotated[str, Field(description="its pending permission's request_id")],
        allow: bool,
        ctx: Context,
        message: Annotated[str, Field(description="a note for the sub-agent")] = "",
    ) -> dict[str, Any]:
        """Allow or deny a permission request of one of your sub-agents."""
        return await _answer(
            tools.answer_permission(_caller(ctx), agent_id, request_id, allow, message)
        )


def _caller(ctx: Context) -> str:
    """The agent this call's own HTTP request was authenticated as (`_AgentAuth`)."""
    request = ctx.request_context.request
    user = request.scope.get("user") if isinstance(request, Request) else None
    if not isinstance(user, AuthenticatedUser):
        raise ToolError("no agent credential on this request")
    return user.access_token.client_id


async def _answer(call: Awaitable[JsonObject]) -> dict[str, Any]:
    try:
        return dict(await call)
    except errors.CorralError as exc:
        raise ToolError(f"{exc.message} [{exc.reason}]") from exc


class _AgentAuth:
    """Every HTTP request needs a token corral minted for an agent `admits` lets in (an open
    one); it names the calling agent."""

    def __init__(
        self,
        app: ASGIApp,
        requests: AgentRequests,
        tokens: AgentTokens,
        admits: Callable[[str], bool],
    ) -> None:
        self._app = app
        self._requests = requests
        self._tokens = tokens
        self._admits = admits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self._app(scope, receive, send)
            return
        token = _bearer(scope)
        agent_id = self._tokens.agent_of(token) if token else None
        if agent_id is None or not self._admits(agent_id):
            await _refuse(send, "missing or unknown token" if token else "no bearer token")
            return
        scope = {**scope, "user": _user(token, agent_id)}
        if not await self._requests.serve(agent_id, scope, receive, send):
            await _refuse(send, "the agent was closed")


def _user(token: str, agent_id: str) -> AuthenticatedUser:
    return AuthenticatedUser(AccessToken(token=token, client_id=agent_id, scopes=[]))


def _bearer(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


async def _refuse(send: Send, why: str) -> None:
    body = json.dumps({"error": "invalid_token", "error_description": why}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class McpEndpoint:
    """The MCP server on `listen` (loopback), and the per-agent entries given to sessions.
    `admits(agent_id)` says whether an agent may use the tools now (the daemon: while it is
    open); `agent_closed` is told when one closes."""

    def __init__(
        self,
        tools: SubagentTools,
        listen: str,
        tokens: AgentTokens | None = None,
        admits: Callable[[str], bool] | None = None,
    ):
        self.tokens = tokens or AgentTokens()
        self._tools = tools
        self._admits: Callable[[str], bool] = admits or (lambda _: True)
        self._requests: AgentRequests | None = None
        host, _, port = listen.rpartition(":")
        self._host = host
        self._port = int(port)
        self.port = 0
        self._server: AsgiServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}{PATH}"

    def server_for(self, agent_id: str) -> McpServer:
        """What a session of `agent_id` is given: the URL and that agent's own token."""
        return McpServer(SERVER_NAME, self.url, self.tokens.token_for(agent_id))

    async def start(self) -> int:
        """Bind and serve; the bound port. OSError when the address cannot be bound."""
        bare = self._host.strip("[]")
        hosts = [f"{self._host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"]
        security = TransportSecuritySettings(
            allowed_hosts=hosts, allowed_origins=[f"http://{h}" for h in hosts]
        )
        app = build_server(self._tools).streamable_http_app(
            streamable_http_path=PATH, transport_security=security, host=bare
        )
        self._requests = requests = AgentRequests(app, PATH)
        auth = _AgentAuth(app, requests, self.tokens, self._admits)
        self._server = AsgiServer(auth, "corral-mcp", STOP_GRACE_S)
        self.port = self._server.start(f"{self._host}:{self._port}")
        log.debug("MCP tools on %s", self.url)  # in the start-up line
        return self.port

    @property
    def open_requests(self) -> int:
        return 0 if self._requests is None else self._requests.open_requests

    def agent_closed(self, agent_id: str) -> None:
        """The agent closed (or was archived): `admits` refuses its token from now on; cut
        its requests in flight and end its sessions."""
        if self._requests is not None:
            user = _user(self.tokens.token_for(agent_id), agent_id)
            self._requests.end(agent_id, user, f"{self._host}:{self.port}")

    async def stop(self) -> None:
        if self._server is None:
            return
        if self._requests is not None:
            await self._requests.stop()
        await self._server.stop()
        self._server = None
