"""Who may call the web port: the page's own origin (or one `--web-allow-origin` names), on a
host name that is this daemon's, with a bearer token when the daemon has a token file.

Browsers send `Origin` on cross-origin and on every POST; a request whose origin is neither the
page's own nor allowed is refused before anything runs (403), and CORS preflights are answered
only for allowed origins. On a loopback listener the Host header must be a loopback name too: a
page of another site whose name resolves to 127.0.0.1 (DNS rebinding) would otherwise be
"same-origin" with the daemon. Tokens are checked with rpc/auth.py's constant-time TokenFile.
Must not: log, echo or keep a presented token (only its digest, see calls.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server.listen import is_loopback_host
from corral_server.rpc.auth import TokenFile, checked_token, unauthenticated
from corral_server.rpc.roles import denied, permits
from corral_server.web.calls import token_digest
from corral_server.web.context import WebStatus

Headers = list[tuple[bytes, bytes]]

# What Connect and gRPC-Web clients send and read (connect-web, grpc-web, Envoy's defaults).
ALLOW_HEADERS = (
    "content-type, connect-protocol-version, connect-timeout-ms, authorization, "
    "x-grpc-web, x-user-agent, grpc-timeout"
)
EXPOSE_HEADERS = "grpc-status, grpc-message, grpc-status-details-bin"
PREFLIGHT_MAX_AGE_S = 7200


def _loopback_host(host: str) -> bool:
    """A Host header (with or without its port) that names this machine's loopback."""
    name = host.rpartition(":")[0] if host.rfind(":") > host.rfind("]") else host
    name = name.strip("[]").lower()
    return name.endswith(".localhost") or is_loopback_host(name)


@dataclass(frozen=True, slots=True)
class Access:
    tokens: TokenFile | None
    allow_origins: frozenset[str]
    loopback: bool  # the listener's address is loopback

    def refusal(self, scheme: str, headers: dict[str, str]) -> str:
        """Why this request is refused outright (403), or ""."""
        host = headers.get("host", "")
        if self.loopback and not _loopback_host(host):
            return f"the web port on loopback answers loopback host names only, not {host!r}"
        origin = headers.get("origin")
        if origin is None or self.allowed(origin, scheme, host):
            return ""
        return f"cross-origin requests from {origin!r} are refused (see --web-allow-origin)"

    def allowed(self, origin: str, scheme: str, host: str) -> bool:
        return origin.lower() == f"{scheme}://{host}".lower() or origin in self.allow_origins

    def cors(self, headers: dict[str, str]) -> Headers:
        """The CORS headers of an answer to an allowed other origin ([] for same-origin)."""
        origin = headers.get("origin")
        if origin is None or origin not in self.allow_origins:
            return []
        return [
            (b"access-control-allow-origin", origin.encode()),
            (b"access-control-expose-headers", EXPOSE_HEADERS.encode()),
            (b"vary", b"Origin"),
        ]

    def preflight(self, headers: dict[str, str]) -> Headers:
        return [
            *self.cors(headers),
            (b"access-control-allow-methods", b"POST, GET, OPTIONS"),
            (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
        ]

    def authenticate(
        self, authorization: list[str], method: str
    ) -> tuple[WebStatus | None, bytes | None, str]:
        """(the UNAUTHENTICATED or PERMISSION_DENIED status, or None; the digest of the
        accepted token; its role, "" without tokens)."""
        if self.tokens is None:
            return None, None, ""
        reason, token = checked_token(
            self.tokens, tuple(("authorization", v) for v in authorization)
        )
        role = self.tokens.role_of(token) if not reason else None
        if role is None or not permits(role, method):
            status = unauthenticated(reason) if reason else denied(method)
            refused = WebStatus.from_grpc(status.code, status.details, status.trailing_metadata)
            return refused, None, ""
        return None, token_digest(token), role
