"""The web port: the WebApp over the daemon's servicers, served by uvicorn on `--web-listen`."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.descriptor import ServiceDescriptor

from corral_server.asgi_server import AsgiServer, Tls
from corral_server.listen import is_loopback
from corral_server.rpc.auth import TokenFile
from corral_server.web.access import Access
from corral_server.web.app import WebApp
from corral_server.web.calls import MAX_CALLS, MAX_CALLS_PER_CLIENT, OpenCalls
from corral_server.web.methods import method_table
from corral_server.web.static import STATIC_DIR, StaticFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WebSettings:
    listen: str
    max_request_bytes: int
    allow_origins: tuple[str, ...] = ()
    max_calls_per_client: int = MAX_CALLS_PER_CLIENT
    max_calls: int = MAX_CALLS
    tls: Tls | None = None
    static_dir: Path = STATIC_DIR
    grace_s: float = 10.0


class WebEndpoint:
    def __init__(
        self,
        settings: WebSettings,
        servicers: Mapping[ServiceDescriptor, object],
        tokens: TokenFile | None,
        rpc_errors: Counter[str] | None = None,
    ) -> None:
        self.settings = settings
        access = Access(tokens, frozenset(settings.allow_origins), is_loopback(settings.listen))
        self.calls = OpenCalls(settings.max_calls_per_client, settings.max_calls)
        self.app = WebApp(
            method_table(servicers),
            access,
            self.calls,
            StaticFiles(settings.static_dir),
            settings.max_request_bytes,
            rpc_errors,
        )
        self._server = AsgiServer(self.app, "corral-web", settings.grace_s, settings.tls)
        self.port = 0

    @property
    def url(self) -> str:
        scheme = "https" if self.settings.tls else "http"
        host = self.settings.listen.rpartition(":")[0]
        return f"{scheme}://{host}:{self.port}/"

    def start(self) -> int:
        """Bind and serve; the bound port. OSError naming the address when it cannot bind."""
        try:
            self.port = self._server.start(self.settings.listen)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise OSError(f"cannot listen on {self.settings.listen} (--web-listen): {why}") from exc
        log.info("web (Connect, gRPC-Web, dashboard) on %s", self.url)
        return self.port

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop; open exchanges get `grace_s` to end (streams have ended by then in a drain)."""
        await self._server.stop(grace_s)
