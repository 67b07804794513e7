"""Bearer tokens: the token file and the interceptor that checks `authorization` on every call.

The token file holds one or more tokens, one per line, each optionally followed by its role
after a space: `full` (the default: every call) or `read` (only the calls that read, see
rpc/roles.py); blank lines and lines starting with `#` are ignored. A file of bare tokens, as
before roles, gives every token `full`. A reload that changes a token's role ends its open
calls as a removal does (the client reconnects under the new role). `TokenFile.reload`
(SIGHUP) swaps in a new set only when the new file is good, and otherwise keeps the old set
and logs why. Every RPC needs `authorization: Bearer <token>` except the health service (a
load balancer checks it without credentials); reflection needs it too.
The gRPC interceptor that asks for it is rpc/bearer.py; this module holds what any edge needs.

A presented token is hashed and compared with the hash of every configured token by
`hmac.compare_digest`, all of them each time, so neither the match's position nor a token's
length shows in the timing.

Revocation cuts open calls. Every call a token let in holds an `OpenCall` from
`TokenFile.open_call(token)` for as long as it runs; a reload that drops the token revokes each
of them at once: `OpenCall.revoked` (an asyncio.Event) is set and the callbacks given to
`OpenCall.on_revoke` run, on the loop that called `reload`. The gRPC interceptor (rpc/bearer.py)
cancels the call's task and ends it with UNAUTHENTICATED / TOKEN_REVOKED, so nothing more is
written on it; any other edge (HTTP streams) does the same with its own calls:

    with tokens.open_call(token) as call:   # revoked at once if the token is not valid now
        call.on_revoke(task.cancel)         # or: await call.revoked.wait()
        ...                                 # the call's work; leaving the block forgets it

Must not: log, echo or keep a presented token (the registry keys calls by its digest).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Callable
from pathlib import Path

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
TOKEN_REVOKED = "TOKEN_REVOKED"


# What a token may do: every call, or only the calls that read (rpc/roles.py).
FULL = "full"
READ = "read"
ROLES = (FULL, READ)


class TokenFileError(ValueError):
    """The token file cannot be read or holds no usable token; the message says which line."""


def parse_tokens(text: str, source: str) -> tuple[tuple[bytes, str], ...]:
    """The (token, role) pairs in a token file's text; TokenFileError when it has none or a
    bad line. The error names the line, never its content (it may be a secret)."""
    tokens: list[tuple[bytes, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, role = line.partition(" ")
        role = role.strip() or FULL
        token = word.encode("utf-8", errors="replace")
        if not set(token) <= _VISIBLE:
            raise TokenFileError(
                f"{source} line {number}: a token is visible ASCII without spaces "
                "(one token per line, then optionally its role)"
            )
        if role not in ROLES:
            raise TokenFileError(
                f"{source} line {number}: after the token comes its role, full or read"
            )
        tokens.append((token, role))
    if not tokens:
        raise TokenFileError(f"{source} holds no token (one per line; # starts a comment)")
    return tuple(tokens)


def read_tokens(path: Path) -> tuple[tuple[bytes, str], ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise TokenFileError(f"cannot read the token file {path}: {reason}") from None
    return parse_tokens(text, f"the token file {path}")


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class OpenCall:
    """An open call's hold on the token that let it in (`TokenFile.open_call`). `revoked` is
    set, and every `on_revoke` callback runs once, when a reload drops that token. Closing it
    (leaving its `with` block) makes the registry forget the call."""

    __slots__ = ("_callbacks", "_forget", "digest", "revoked")

    def __init__(self, digest: bytes, forget: Callable[[OpenCall], None] | None) -> None:
        self.digest = digest
        self.revoked = asyncio.Event()
        self._forget = forget  # None once closed or revoked: nothing left to forget
        self._callbacks: list[Callable[[], object]] = []

    def on_revoke(self, callback: Callable[[], object]) -> None:
        """Run `callback` when the token is revoked (at once if it already is)."""
        if self.revoked.is_set():
            callback()
        else:
            self._callbacks.append(callback)

    def close(self) -> None:
        forget, self._forget = self._forget, None
        if forget is not None:
            forget(self)

    def revoke(self) -> None:
        self._forget = None
        self.revoked.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def __enter__(self) -> OpenCall:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class TokenFile:
    """The tokens of one file, reloadable. Raises TokenFileError when the first read fails."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digests, self._roles = _entries(read_tokens(path))
        # The calls open right now, by the digest of the token that let them in (no leak:
        # each call removes itself when it ends, and an emptied set goes with it).
        self._open: dict[bytes, set[OpenCall]] = {}
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
        before = dict(zip(self._digests, self._roles, strict=True))
        self._digests, self._roles = _entries(tokens)
        log.info("reloaded %d token(s) from %s", self.count, self.path)
        self._revoke_dropped(before)
        return True

    @property
    def open_calls(self) -> int:
        return sum(len(calls) for calls in self._open.values())

    def open_call(self, token: bytes) -> OpenCall:
        """Register a call that `token` let in, until the handle is closed; a token that is
        not valid now gives a handle revoked already."""
        digest = _digest(token)
        if not self.accepts(token):
            call = OpenCall(digest, None)
            call.revoke()
            return call
        call = OpenCall(digest, self._forget)
        self._open.setdefault(digest, set()).add(call)
        return call

    def _forget(self, call: OpenCall) -> None:
        calls = self._open.get(call.digest)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self._open[call.digest]

    def _revoke_dropped(self, before: dict[bytes, str]) -> None:
        """Revoke every open call whose token the file no longer holds, or holds with
        another role than it had."""
        now = dict(zip(self._digests, self._roles, strict=True))
        dropped = [digest for digest in self._open if now.get(digest) != before.get(digest)]
        revoked = 0
        for digest in dropped:
            calls = self._open.pop(digest)
            revoked += len(calls)
            for call in calls:
                call.revoke()
        if revoked:
            log.info("revoked %d open call(s) of removed token(s)", revoked)

    def holds(self, digest: bytes) -> bool:
        """True when `digest` is the digest of one of the tokens (compared with every one)."""
        found = False
        for mine in self._digests:
            found |= hmac.compare_digest(mine, digest)
        return found

    def accepts(self, presented: bytes) -> bool:
        """True when `presented` is one of the tokens; compares against every one of them."""
        return self.role_of(presented) is not None

    def role_of(self, presented: bytes) -> str | None:
        """The role of `presented` (None: not a token); compares against every token."""
        wanted = _digest(presented)
        role = None
        for digest, its_role in zip(self._digests, self._roles, strict=True):
            if hmac.compare_digest(digest, wanted):
                role = its_role
        return role


def _entries(tokens: tuple[tuple[bytes, str], ...]) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """The digests and the roles of the file's tokens, in the same order."""
    return tuple(_digest(t) for t, _ in tokens), tuple(role for _, role in tokens)


Metadata = tuple[tuple[str, str | bytes], ...] | None


def check(tokens: TokenFile, metadata: Metadata) -> str:
    """ "" when the call carries a good bearer token, else the ErrorInfo reason to refuse it."""
    return checked_token(tokens, metadata)[0]


def checked_token(tokens: TokenFile, metadata: Metadata) -> tuple[str, bytes]:
    """("", the token) when the call carries a good bearer token, else (the reason, b"").
    Its role: `tokens.role_of(token)`."""
    values = [v for k, v in metadata or () if k == "authorization"]
    if not values:
        return TOKEN_MISSING, b""
    if len(values) > 1:
        return TOKEN_INVALID, b""
    value = values[0]
    raw = value if isinstance(value, bytes) else value.encode()
    scheme, _, token = raw.strip().partition(b" ")
    token = token.strip()
    if scheme.lower() != b"bearer" or not tokens.accepts(token):
        return TOKEN_INVALID, b""
    return "", token


_MESSAGES = {
    TOKEN_MISSING: "this call needs a token: send the metadata 'authorization: Bearer <token>'",
    TOKEN_INVALID: "the bearer token is not valid (expected 'authorization: Bearer <token>')",
    TOKEN_REVOKED: "the bearer token of this call was revoked (removed from the token file)",
}


def unauthenticated(reason: str) -> grpc.Status:
    """UNAUTHENTICATED with an ErrorInfo carrying `reason` (no metadata: nothing echoed)."""
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
    status = status_pb2.Status(
        code=code_pb2.UNAUTHENTICATED, message=_MESSAGES[reason], details=[info]
    )
    return rpc_status.to_status(status)
