"""What each agent has open on the MCP endpoint, so that closing the agent ends it: the HTTP
requests in flight (a tool call waiting, an agent's GET stream) and the SDK sessions its
requests opened.

`AgentRequests.serve` runs one authenticated request inside a cancel scope kept under its
agent, and notes the `mcp-session-id` the SDK answers with. `end(agent_id)` cancels the
agent's requests in flight and then ends each of its sessions the way a client would, with a
DELETE through the app (the SDK's own session manager stops the session and forgets it).

Must not: hold a token (a DELETE is sent as the agent's user, built by the caller), or keep
anything for an agent once it has ended.
"""

from __future__ import annotations

import asyncio
import logging

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"


class AgentRequests:
    def __init__(self, app: ASGIApp, path: str) -> None:
        self._app = app
        self._path = path
        self._in_flight: dict[str, set[anyio.CancelScope]] = {}
        # Session ids the SDK gave each agent's requests (a client's DELETE removes its own;
        # one ended by the SDK's idle timeout stays until the agent ends: a DELETE then 404s).
        self._sessions: dict[str, set[str]] = {}
        self._endings: set[asyncio.Task[None]] = set()

    @property
    def open_requests(self) -> int:
        return sum(len(scopes) for scopes in self._in_flight.values())

    async def serve(self, agent_id: str, scope: Scope, receive: Receive, send: Send) -> bool:
        """Serve one request of `agent_id` (already authenticated: `scope["user"]` is set).
        False when the agent ended before anything was answered: the caller refuses it."""
        deleting = scope.get("method") == "DELETE"
        if deleting:
            self._forget_session(agent_id, _header(scope, SESSION_HEADER))
        started = completed = False

        async def noting_session(message: Message) -> None:
            nonlocal started, completed
            if message["type"] == "http.response.start":
                started = True
                session_id = _header(message, SESSION_HEADER)
                if session_id and not deleting:
                    self._sessions.setdefault(agent_id, set()).add(session_id)
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                completed = True
            await send(message)

        with anyio.CancelScope() as cut:
            self._in_flight.setdefault(agent_id, set()).add(cut)
            try:
                await self._app(scope, receive, noting_session)
            finally:
                self._forget_request(agent_id, cut)
        if cut.cancelled_caught and started and not completed:
            # A stream cut mid-way ends as a stream (no half-written response).
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return started

    def end(self, agent_id: str, user: object, host: str) -> None:
        """Cut the agent's requests in flight and end its sessions (in the background)."""
        for cut in self._in_flight.pop(agent_id, ()):
            cut.cancel()
        sessions = self._sessions.pop(agent_id, set())
        if sessions:
            task = asyncio.create_task(self._delete(sessions, user, host))
            self._endings.add(task)
            task.add_done_callback(self._endings.discard)

    async def stop(self) -> None:
        for task in list(self._endings):
            task.cancel()
        await asyncio.gather(*self._endings, return_exceptions=True)

    def _forget_request(self, agent_id: str, cut: anyio.CancelScope) -> None:
        scopes = self._in_flight.get(agent_id)
        if scopes is not None:
            scopes.discard(cut)
            if not scopes:
                del self._in_flight[agent_id]

    def _forget_session(self, agent_id: str, session_id: str) -> None:
        sessions = self._sessions.get(agent_id)
        if sessions is not None:
            sessions.discard(session_id)
            if not sessions:
                del self._sessions[agent_id]

    async def _delete(self, sessions: set[str], user: object, host: str) -> None:
        for session_id in sessions:
            scope: Scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "DELETE",
                "scheme": "http",
                "path": self._path,
                "raw_path": self._path.encode(),
                "query_string": b"",
                "root_path": "",
                "headers": [(b"host", host.encode()), (SESSION_HEADER, session_id.encode())],
                "client": None,
                "server": None,
                "user": user,
            }
            try:
                await self._app(scope, _empty_body(), _discard)
            except Exception:
                log.warning("ending MCP session %s failed", session_id[:8], exc_info=True)


def _header(holder: Scope | Message, name: bytes) -> str:
    for key, value in holder.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def _empty_body() -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # no disconnect: the response ends the request
        raise AssertionError("unreachable")

    return receive


async def _discard(_: Message) -> None:
    """The answer to our own DELETE goes nowhere."""
