"""A cluster node's settings (`corral serve --cluster URLS --node-id N --advertise HOST:PORT`):
plain values, checked here so that a bad flag stops the start-up with a clear message."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

NODE_ID = re.compile(r"[A-Za-z0-9_-]+")
MAX_NODE_ID_CHARS = 64


@dataclass(frozen=True)
class ClusterConfig:
    """`urls`: the NATS servers (nats://HOST:PORT each); `node_id`: this node's name in leases
    and claims; `advertise`: the HOST:PORT other nodes and balancers reach its gRPC port at.
    The names of the stream, its subjects and the leases' bucket are settings so that tests
    can give each cluster its own on one set of NATS servers."""

    urls: tuple[str, ...]
    node_id: str
    advertise: str
    stream: str = "CORRAL_EVENTS"
    prefix: str = "corral.events."
    leases_bucket: str = "corral_leases"
    nodes_bucket: str = "corral_nodes"  # the node directory (nodes.py)
    replicas: int = 3
    lease_ms: int = 10_000
    skew_ms: int = 1_000
    connect_s: float = 10.0  # to reach a NATS server at start-up, before giving up


class ClusterStartError(Exception):
    """A node cannot start: no NATS server answered, or its node id is another process's."""


def parse_urls(text: str) -> tuple[str, ...]:
    """`--cluster`'s comma-separated nats:// URLs; ValueError says which one is wrong."""
    urls = tuple(part.strip() for part in text.split(",") if part.strip())
    if not urls:
        raise ValueError("--cluster needs at least one nats://HOST:PORT URL")
    for url in urls:
        host, _, port = url.removeprefix("nats://").rpartition(":")
        if not url.startswith("nats://") or not host or not port.isdigit():
            raise ValueError(f"--cluster: {url!r} is not a nats://HOST:PORT URL")
    return urls


def check_node_id(node_id: str) -> str:
    if not NODE_ID.fullmatch(node_id) or len(node_id) > MAX_NODE_ID_CHARS:
        raise ValueError(
            f"--node-id {node_id!r}: letters, digits, '_' and '-' only, "
            f"1 to {MAX_NODE_ID_CHARS} characters"
        )
    return node_id


def default_node_id() -> str:
    """The host's name, made a valid node id (dots and other characters become '-')."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:MAX_NODE_ID_CHARS]
    return name or "node"


def check_advertise(address: str) -> str:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--advertise {address!r} is not HOST:PORT")
    return address
