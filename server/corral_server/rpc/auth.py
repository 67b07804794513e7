"""Bearer tokens: the token file and the interceptor that checks `authorization` on every call.

The token file holds one or more tokens, one per line; blank lines and lines starting with `#`
are ignored. `TokenFile.reload` (SIGHUP) swaps in a new set only when the new file is good, and
otherwise keeps the old set and logs why. Every RPC needs `authorization: Bearer <token>` except
the health service (a load balancer checks it without credentials); reflection needs it too.

A presented token is hashed and compared with the hash of every configured token by
`hmac.compare_digest`, all of them each time, so neither the match's position nor a token's
length shows in the timing. Must not: log, echo or keep a presented token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral_server.rpc.errors import ERROR_DOMAIN

log = logging.getLogger(__name__)

# Calls anyone may make: health checks come from balancers and probes that hold no token.
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)
# A token is one header value: visible ASCII, no spaces (RFC 6750's b64token is narrower).
_VISIBLE = frozenset(range(0x21, 0x7F))

# ErrorInfo reasons of UNAUTHENTICATED answers.
TOKEN_MISSING = "TOKEN_MISSING"
TOKEN_INVALID = "TOKEN_INVALID"


class TokenFileError(ValueError):
    """The token file cannot be read or holds no usable token; the message says which line."""


def parse_tokens(text: str, source: str) -> tuple[bytes, ...]:
    """The tokens in a token file's text; TokenFileError when it has none or a bad line. The
    error names the line, never its content (it may be a secret)."""
    tokens: list[bytes] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        token = line.encode("utf-8", errors="replace")
        if not set(token) <= _VISIBLE:
            raise TokenFileError(
                f"{source} line {number}: a token is visible ASCII without spaces "
                "(one token per line)"
            )
        tokens.append(token)
    if not tokens:
        raise TokenFileError(f"{source} holds no token (one per line; # starts a comment)")
    return tuple(tokens)


def read_tokens(path: Path) -> tuple[bytes, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise TokenFileError(f"cannot read the token file {path}: {reason}") from None
    return parse_tokens(text, f"the token file {path}")


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class TokenFile:
    """The tokens of one file, reloadable. Raises TokenFileError when the first read fails."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digests = tuple(_digest(t) for t in read_tokens(path))
        if path.stat().st_mode & 0o077:
            log.warning("the token file %s is readable by others: chmod 600 it", path)

    @property
    def count(self) -> int:
        return len(self._digests)

    def reload(self) -> bool:
        """Read the file again; on any error keep the tokens we have and log why."""
        try:
            tokens = read_tokens(self.path)
        except TokenFileError as exc:
            log.error("token reload failed, keeping the previous %d token(s): %s", self.count, exc)
            return False
        self._digests = tuple(_digest(t) for t in tokens)
        log.info("reloaded %d token(s) from %s", self.count, self.path)
        return True

    def accepts(self, presented: bytes) -> bool:
        """True when `presented` is one of the tokens; compares against every one of them."""
        wanted = _digest(presented)
        found = False
        for digest in self._digests:
            found |= hmac.compare_digest(digest, wanted)
        return found


def check(tokens: TokenFile, metadata: tuple[tuple[str, str | bytes], ...] | None) -> str:
    """ "" when the call carries a good bearer token, else the ErrorInfo reason to refuse it."""
    values = [v for k, v in metadata or () if k == "authorization"]
    if not values:
        return TOKEN_MISSING
    if len(values) > 1:
        return TOKEN_INVALID
    value = values[0]
    raw = value if isinstance(value, bytes) else value.encode()
    scheme, _, token = raw.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not tokens.accepts(token.strip()):
        return TOKEN_INVALID
    return ""


_MESSAGES = {
    TOKEN_MISSING: "this call needs a token: send the metadata 'authorization: Bearer <token>'",
    TOKEN_INVALID: "the bearer token is not valid (expected 'authorization: Bearer <token>')",
}


def unauthenticated(reason: str) -> grpc.Status:
    """UNAUTHENTICATED with an ErrorInfo carrying `reason` (no metadata: nothing echoed)."""
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
    status = status_pb2.Status(
        code=code_pb2.UNAUTHENTICATED, message=_MESSAGES[reason], details=[info]
    )
    return rpc_status.to_status(status)


def _ignore_body(_: bytes) -> None:
    """Refused calls never decode their request."""


def _refusal(handler: grpc.RpcMethodHandler[Any, Any] | None, reason: str) -> Any:
    """A handler of the same kind as `handler` that answers UNAUTHENTICATED."""
    status = unauthenticated(reason)

    async def refuse(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(status.code, status.details, status.trailing_metadata)

    async def unary(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await refuse(context)

    async def streaming(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await refuse(context)
        yield None  # unreachable: abort raises

    streams_in = handler is not None and handler.request_streaming
    streams_out = handler is not None and handler.response_streaming
    kw: dict[str, Any] = {"request_deserializer": _ignore_body}
    match (streams_in, streams_out):
        case (False, False):
            return grpc.unary_unary_rpc_method_handler(unary, **kw)
        case (False, True):
            return grpc.unary_stream_rpc_method_handler(streaming, **kw)
        case (True, False):
            return grpc.stream_unary_rpc_method_handler(unary, **kw)
        case _:
            return grpc.stream_stream_rpc_method_handler(streaming, **kw)


if TYPE_CHECKING:  # generic in the stubs only
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor


class BearerTokens(_Interceptor):
    """Refuses, with UNAUTHENTICATED, every call but health that lacks a good bearer token.
    Runs first, so a refused call's body is never decoded."""

    def __init__(self, tokens: TokenFile) -> None:
        self._tokens = tokens

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method: str = handler_call_details.method
        if method.startswith(EXEMPT_PREFIXES):
            return await continuation(handler_call_details)
        reason = check(self._tokens, handler_call_details.invocation_metadata)
        handler = await continuation(handler_call_details)
        if not reason:
            return handler
        log.debug("refused %s: %s", method, reason)
        result: grpc.RpcMethodHandler[Any, Any] = _refusal(handler, reason)
        return result
