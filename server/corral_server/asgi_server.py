"""An ASGI application served by uvicorn inside the daemon's event loop (the MCP tools and the
web port use it).

uvicorn's own signal handlers stay off: the daemon owns SIGTERM and SIGINT and drains. The
socket is bound here, before uvicorn starts, so a taken port fails the start-up at once with
OSError, and port 0 tells the caller which port it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the daemon's own handlers stay: it drains on SIGTERM


@dataclass(frozen=True, slots=True)
class Tls:
    cert: Path
    key: Path
    client_ca: Path | None = None


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on HOST:PORT (IPv6 hosts with or without brackets)."""
    host, _, port = listen.rpartition(":")
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    return socket.create_server((bare, int(port)), family=family)


class AsgiServer:
    """One uvicorn server on one socket, as a task of the running loop."""

    def __init__(self, app: Any, name: str, grace_s: float, tls: Tls | None = None) -> None:
        self._app = app
        self._name = name
        self._grace_s = grace_s
        self._tls = tls
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    def start(self, listen: str) -> int:
        """Bind and serve; the bound port. OSError when the address cannot be bound."""
        sock = bind(listen)
        self.port = sock.getsockname()[1]
        tls: dict[str, Any] = {}
        if self._tls is not None:
            tls = {"ssl_certfile": str(self._tls.cert), "ssl_keyfile": str(self._tls.key)}
            if self._tls.client_ca is not None:
                tls["ssl_ca_certs"] = str(self._tls.client_ca)
                tls["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        config = uvicorn.Config(
            self._app,
            log_config=None,
            access_log=False,
            lifespan="on",
            ws="none",
            timeout_graceful_shutdown=max(1, int(self._grace_s)),
            **tls,
        )
        config.load()  # a bad certificate fails the start-up, not the server's task
        self._server = server = _Uvicorn(config)
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name=self._name)
        return self.port

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting, let open exchanges end within the grace (the constructor's unless
        given), then close them."""
        if self._server is None or self._task is None:
            return
        if grace_s is not None:  # read by uvicorn's shutdown, which starts after should_exit
            self._server.config.timeout_graceful_shutdown = max(0, grace_s)  # type: ignore[assignment]
        self._server.should_exit = True
        await self._task
        self._server = self._task = None
