"""The metrics endpoint over HTTP: prometheus-client's WSGI app in a thread-per-request server
of our own (what its `start_http_server` does, which has no way to ask for credentials),
optionally behind the daemon's bearer tokens.

Off loopback, `corral serve` requires a token file, and the endpoint then answers only a
request with `Authorization: Bearer TOKEN` (Prometheus: `authorization: {credentials_file}`);
without a good one: 401 and no metrics. On loopback it stays open, as before.

Must not: log or echo a presented token. Runs in threads: it reads only the token file's
current digests (a tuple the loop swaps whole on reload).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry

from corral_server.rpc.auth import TokenFile

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REFUSAL = b"this endpoint needs 'Authorization: Bearer <token>' (a token of the token file)\n"


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log (scrapes every few seconds)."""


def serve_metrics(
    host: str, port: int, registry: CollectorRegistry, tokens: TokenFile | None
) -> WSGIServer:
    """Serve `registry` on host:port in a daemon thread (with `tokens`: bearer only); the
    server (its `server_port`; `shutdown` and `server_close` stop it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(ThreadingWSGIServer):
        address_family = family

    app: WsgiApp = make_wsgi_app(registry)
    if tokens is not None:
        app = _bearer_only(app, tokens)
    server = make_server(host, port, app, Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="corral-metrics", daemon=True).start()
    return server


def _bearer_only(app: WsgiApp, tokens: TokenFile) -> WsgiApp:
    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        scheme, _, token = str(environ.get("HTTP_AUTHORIZATION", "")).strip().partition(" ")
        presented = token.strip().encode("latin-1", errors="replace")
        if scheme.lower() == "bearer" and presented and tokens.accepts(presented):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_REFUSAL))),
                ("WWW-Authenticate", 'Bearer realm="corral metrics"'),
            ],
        )
        return [_REFUSAL]

    return guarded
