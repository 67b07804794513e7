"""The CLI's connection to the daemon: one sync channel (plaintext or TLS, with a bearer token
on every call when one is given), the four service stubs, and how a prompt given on the command
line becomes request content.

Must not: print, or decide exit codes (that is render.py and failure.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import grpc

from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral.v1 import turn_service_pb2_grpc as turn_grpc

if TYPE_CHECKING:  # what a sync call returns, named in the stubs only
    from grpc import _CallFuture, _CallIterator

Req = TypeVar("Req")
Resp = TypeVar("Resp")

DEFAULT_ADDR = "127.0.0.1:50051"
# Unary calls only; streams (run, send --follow, logs -f) last as long as the turn or the user.
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Client:
    addr: str
    timeout_s: float
    channel: grpc.Channel  # for a service without a stub here (health)
    agents: agent_grpc.AgentServiceStub
    turns: turn_grpc.TurnServiceStub
    timeline: tl_grpc.TimelineServiceStub
    events: event_grpc.EventServiceStub


@dataclass(frozen=True)
class Access:
    """How to reach a daemon that asks for more than loopback plaintext: files already read."""

    token: str = ""
    tls: bool = False
    tls_ca: bytes | None = None  # None with tls: the system's authorities
    tls_cert: bytes | None = None  # a client certificate and its key, for mutual TLS
    tls_key: bytes | None = None


class AccessError(ValueError):
    """A token, certificate or key file the CLI cannot use; the message names it."""


def load_access(
    token_file: Path | None,
    env_token: str,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> Access:
    """The token (`--token-file` first, else `CORRAL_TOKEN`) and the TLS files, read now."""
    if (tls_cert is None) != (tls_key is None):
        raise AccessError("--tls-cert and --tls-key go together")
    token = read_token_file(token_file) if token_file is not None else env_token.strip()
    if not all("!" <= c <= "~" for c in token):
        raise AccessError("a token is visible ASCII without spaces")
    return Access(
        token=token,
        tls=tls_ca is not None or tls_cert is not None,
        tls_ca=_read_pem(tls_ca, "--tls-ca"),
        tls_cert=_read_pem(tls_cert, "--tls-cert"),
        tls_key=_read_pem(tls_key, "--tls-key"),
    )


def read_token_file(path: Path) -> str:
    """The first token in a token file (the daemon's format: one per line, # comments, the
    token's role after it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise AccessError(f"cannot read the token file {path}: {reason}") from None
    for line in text.splitlines():
        token = line.strip().partition(" ")[0]
        if token and not token.startswith("#"):
            return token
    raise AccessError(f"the token file {path} holds no token")


def _read_pem(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise AccessError(f"{flag} {path}: cannot read it: {exc.strerror}") from None


class _Details(grpc.ClientCallDetails):
    def __init__(
        self, base: grpc.ClientCallDetails, metadata: tuple[tuple[str, str | bytes], ...]
    ) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = base.wait_for_ready
        self.compression = base.compression


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call, over TLS or plaintext alike (gRPC's
    own token credentials refuse plaintext, which a loopback daemon with tokens speaks)."""

    def __init__(self, token: str) -> None:
        self._header: tuple[str, str | bytes] = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _Details(details, (*(details.metadata or ()), self._header))

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Req], _CallFuture[Resp]],
        client_call_details: grpc.ClientCallDetails,
        request: Req,
    ) -> _CallFuture[Resp]:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Req], _CallIterator[Resp]],
        client_call_details: grpc.ClientCallDetails,
        request: Req,
    ) -> _CallIterator[Resp]:
        return continuation(self._details(client_call_details), request)


def open_channel(addr: str, access: Access) -> grpc.Channel:
    """A channel to `addr`: TLS when `access` says so, with its token on every call."""
    if access.tls:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=access.tls_ca,
            private_key=access.tls_key,
            certificate_chain=access.tls_cert,
        )
        channel = grpc.secure_channel(addr, credentials)
    else:
        channel = grpc.insecure_channel(addr)
    if access.token:
        return grpc.intercept_channel(channel, _Bearer(access.token))
    return channel


@contextmanager
def connect(addr: str, timeout_s: float, access: Access | None = None) -> Iterator[Client]:
    """A client on a fresh channel: plaintext without a token unless `access` says otherwise."""
    with open_channel(addr, access or Access()) as channel:
        yield Client(
            addr=addr,
            timeout_s=timeout_s,
            channel=channel,
            agents=agent_grpc.AgentServiceStub(channel),
            turns=turn_grpc.TurnServiceStub(channel),
            timeline=tl_grpc.TimelineServiceStub(channel),
            events=event_grpc.EventServiceStub(channel),
        )


def stop(call: grpc.RpcContext) -> None:
    """Cancel a streaming call (its iterator then ends with CANCELLED, which nobody reads)."""
    call.cancel()


def prompt_text(words: Sequence[str]) -> str:
    """The prompt words joined with spaces; a lone `-` reads the prompt from stdin (so several
    lines, e.g. scripted directives, can be piped in)."""
    if list(words) == ["-"]:
        return sys.stdin.read().rstrip("\n")
    return " ".join(words)


def prompt_content(words: Sequence[str]) -> list[content_pb.ContentPart]:
    return [content_pb.ContentPart(text=prompt_text(words))]


def parse_labels(pairs: Sequence[str]) -> dict[str, str]:
    """`k=v` pairs into a dict; ValueError names the first malformed pair."""
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"label {pair!r} is not key=value")
        labels[key] = value
    return labels
