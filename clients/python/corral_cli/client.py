"""The CLI's connection to the daemon: one sync channel, the four service stubs, and how a
prompt given on the command line becomes request content.

Must not: print, or decide exit codes (that is render.py and failure.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import grpc

from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral.v1 import turn_service_pb2_grpc as turn_grpc

DEFAULT_ADDR = "127.0.0.1:50051"
# Unary calls only; streams (run, send --follow, logs -f) last as long as the turn or the user.
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Client:
    addr: str
    timeout_s: float
    agents: agent_grpc.AgentServiceStub
    turns: turn_grpc.TurnServiceStub
    timeline: tl_grpc.TimelineServiceStub
    events: event_grpc.EventServiceStub


@contextmanager
def connect(addr: str, timeout_s: float) -> Iterator[Client]:
    """A client on a fresh insecure channel (the daemon listens on loopback without a token)."""
    with grpc.insecure_channel(addr) as channel:
        yield Client(
            addr=addr,
            timeout_s=timeout_s,
            agents=agent_grpc.AgentServiceStub(channel),
            turns=turn_grpc.TurnServiceStub(channel),
            timeline=tl_grpc.TimelineServiceStub(channel),
            events=event_grpc.EventServiceStub(channel),
        )


def stop(call: grpc.RpcContext) -> None:
    """Cancel a streaming call (its iterator then ends with CANCELLED, which nobody reads)."""
    call.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs


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
