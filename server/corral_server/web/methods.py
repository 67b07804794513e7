"""The web edge's method table: each corral.v1 method by its URL path, bound to the servicer
object the gRPC server uses.

A servicer method takes (request, context): unary ones return the response message, streaming
ones are async iterators of messages, or of already serialized bytes (EventService.Subscribe
yields the hub's framed batches, each a serialized SubscribeResponse).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass


@dataclass(frozen=True, slots=True)
class Method:
    name: str  # "corral.v1.AgentService/CreateAgent", as rpc/malformed.py names it
    streaming: bool  # server-streaming (no corral method streams requests)
    request_type: type[Message]
    response_type: type[Message]
    # (request, context) -> Awaitable[response] | AsyncIterator[response | bytes]
    call: Callable[[Any, Any], Any]

    @property
    def path(self) -> str:
        return "/" + self.name


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def method_table(servicers: Mapping[ServiceDescriptor, object]) -> dict[str, Method]:
    """Every method of every service, keyed by its path. Raises ValueError when a servicer
    lacks a method (a schema change the web edge would otherwise hide), and skips methods
    that stream requests (browsers cannot send them over HTTP/1.1)."""
    table: dict[str, Method] = {}
    for service, servicer in servicers.items():
        for method in service.methods:
            if method.client_streaming:
                continue
            call = getattr(servicer, method.name, None) or getattr(
                servicer, _snake(method.name), None
            )
            if call is None:
                raise ValueError(f"{type(servicer).__name__} has no method {method.name}")
            entry = Method(
                f"{service.full_name}/{method.name}",
                method.server_streaming,
                GetMessageClass(method.input_type),
                GetMessageClass(method.output_type),
                call,
            )
            table[entry.path] = entry
    return table
