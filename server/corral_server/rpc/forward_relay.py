"""The other half of forwarding (rpc/forwarding.py decides what goes where): calling the same
method on the owning node over a pooled grpc.aio channel, with the caller's remaining
deadline and invocation metadata (its bearer token included: the owner authenticates the
call again), and answering the caller with the owner's answer or status unchanged: code,
message and trailing metadata (the google.rpc.Status details among them).

A call the owner never answered (its address unknown, refused, or the connection gone) is
UNAVAILABLE / `OWNER_UNREACHABLE` naming the node and address, so a client retries; an
UNAVAILABLE the owner itself answered (draining, a full disk) carries corral's ErrorInfo and
passes unchanged. The rules: docs/cluster.md#forwarding.

Must not: forward the transport's own headers (content type, HTTP/2 and grpc headers, the web
edge's browser headers), or keep a channel past `close`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral_server.rpc.errors import ERROR_DOMAIN, clip

# Sent with every forwarded call: the node that forwarded it. A node never forwards such a
# call again, so a wrong belief about an owner costs one hop, never a loop.
FORWARDED_FROM = "corral-forwarded-from"
OWNER_MOVED = "OWNER_MOVED"
OWNER_UNREACHABLE = "OWNER_UNREACHABLE"
# What the cluster's servicers answer for a change to an agent another node owns.
OWNED_ELSEWHERE = "AGENT_OWNED_ELSEWHERE"
DETAILS_KEY = "grpc-status-details-bin"
# Message size limits of the forwarding channels: the server's own (rpc/server.py).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# Request headers that belong to one hop's transport, not to the call: never forwarded.
_TRANSPORT = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "connection",
        "content-length",
        "content-type",
        "cookie",
        "host",
        "keep-alive",
        "origin",
        "referer",
        "te",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-grpc-web",
        "x-user-agent",
        FORWARDED_FROM,
    }
)
_TRANSPORT_PREFIXES = (":", "grpc-", "connect-", "sec-")

Metadata = Sequence[tuple[str, str | bytes]]


@dataclass(frozen=True)
class Forwarding:
    """How this node finds agents' owners. `owner_of(agent_id)`: the node that owns the agent,
    None when this node does or nobody is known to; `address_of(node)`: the HOST:PORT other
    nodes reach its gRPC port at, None when unknown; `place(labels)`, when set: the node a
    CreateAgent with these labels goes to (None: here), raising a CorralError for a node it
    cannot use. The callables are synchronous look-ups of a local cache."""

    node: str
    owner_of: Callable[[str], str | None]
    address_of: Callable[[str], str | None]
    place: Callable[[Mapping[str, str]], str | None] | None = None
    credentials: grpc.ChannelCredentials | None = None  # TLS to the other nodes


def unavailable(reason: str, message: str, metadata: Mapping[str, str]) -> grpc.Status:
    """UNAVAILABLE with corral's ErrorInfo (`reason`, `metadata`)."""
    info = error_details_pb2.ErrorInfo(
        reason=reason, domain=ERROR_DOMAIN, metadata={k: clip(v) for k, v in metadata.items()}
    )
    packed = any_pb2.Any()
    packed.Pack(info)
    status = status_pb2.Status(
        code=code_pb2.UNAVAILABLE, message=clip(message, 512), details=[packed]
    )
    return rpc_status.to_status(status)


def error_info(trailing: Iterable[tuple[str, Any]] | None) -> error_details_pb2.ErrorInfo | None:
    """Corral's ErrorInfo in a status's trailing metadata, if it has one."""
    for key, value in trailing or ():
        if key != DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                return info
    return None


def carried(metadata: Iterable[tuple[str, Any]], node: str) -> list[tuple[str, str | bytes]]:
    """The caller's metadata as the owner gets it: without this hop's transport headers, and
    saying which node forwarded it."""
    kept: list[tuple[str, str | bytes]] = []
    for key, value in metadata:
        if key in _TRANSPORT or key.startswith(_TRANSPORT_PREFIXES):
            continue
        if key.endswith("-bin") != isinstance(value, bytes):
            continue  # a web header named like binary metadata: not valid gRPC metadata
        kept.append((key, value))
    kept.append((FORWARDED_FROM, node))
    return kept


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


class Relay:
    """Calls on other nodes, one pooled channel per address (made on first use)."""

    def __init__(self, forwarding: Forwarding) -> None:
        self.forwarding = forwarding
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def unary(self, method: str, response: Any, request: Any, context: Any, node: str) -> Any:
        """The owner's answer to `method`; its status, when it refused, aborts the call."""
        address, channel = await self._channel(context, node)
        call = channel.unary_unary(
            method, request_serializer=_serialize, response_deserializer=response.FromString
        )
        try:
            return await call(request, **self._options(context))
        except grpc.aio.AioRpcError as error:
            await self._answer(context, error, node, address)

    async def stream(
        self, method: str, response: Any, request: Any, context: Any, node: str
    ) -> AsyncIterator[Any]:
        """The owner's stream of answers to `method`, then its status."""
        address, channel = await self._channel(context, node)
        call = channel.unary_stream(
            method, request_serializer=_serialize, response_deserializer=response.FromString
        )(request, **self._options(context))
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as error:
            await self._answer(context, error, node, address)
        finally:
            call.cancel()  # the caller left: the owner's stream ends with it

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()

    def _options(self, context: Any) -> dict[str, Any]:
        authorization = getattr(context, "authorization", "")  # the web edge keeps it apart
        metadata = list(context.invocation_metadata() or ())
        if authorization and not any(key == "authorization" for key, _ in metadata):
            metadata.append(("authorization", authorization))
        return {
            "timeout": context.time_remaining(),  # None: the caller set no deadline
            "metadata": carried(metadata, self.forwarding.node),
        }

    async def _channel(self, context: Any, node: str) -> tuple[str, grpc.aio.Channel]:
        address = self.forwarding.address_of(node)
        if not address:
            await abort(context, unreachable(node, "", "no address is known for it"))
        channel = self._channels.get(address)
        if channel is None:
            options = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
            credentials = self.forwarding.credentials
            if credentials is None:
                channel = grpc.aio.insecure_channel(address, options=options)
            else:
                channel = grpc.aio.secure_channel(address, credentials, options=options)
            self._channels[address] = channel
        return address, channel

    async def _answer(
        self, context: Any, error: grpc.aio.AioRpcError, node: str, address: str
    ) -> NoReturn:
        trailing = tuple(error.trailing_metadata() or ())
        if error.code() is grpc.StatusCode.UNAVAILABLE and error_info(trailing) is None:
            await abort(context, unreachable(node, address, error.details() or ""))
        await context.abort(error.code(), error.details() or "", trailing)
        raise AssertionError("unreachable: abort raises")


def unreachable(node: str, address: str, why: str) -> grpc.Status:
    where = f" at {address}" if address else ""
    return unavailable(
        OWNER_UNREACHABLE,
        f"node {node}{where}, where the call goes (the agent's owner, or where it is placed), "
        f"could not be reached: {why}; retry",
        {"node": node, "address": address},
    )


async def abort(context: Any, status: grpc.Status) -> NoReturn:
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: abort raises")
