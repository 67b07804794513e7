"""The node directory, in a JetStream KV bucket (three replicas, like the leases): the key is a
node id, the value its advertised gRPC address, how many agents it runs, and when its entry
expires (docs/cluster.md#nodes).

Each node registers itself when it starts and refreshes its entry in the background, every
third of the entry's duration, with the count of agents it runs then. Every node keeps a
local copy of the whole directory, kept current by a watch on the bucket, so the look-ups the
forwarding and the placement make on every call (`address_of`, `alive`, `least_loaded`) are
synchronous and never wait on the network.

The expiry is read against the injectable clock, with the leases' skew margin: another node
counts a node alive until its expiry plus the margin, as it would wait that long before taking
one of its leases. An instance id in the value tells two processes started with one node id
apart: the second refuses to start while the first's entry lives, and a refresh that finds
its entry rewritten by another process stops refreshing (`NodeIdTaken`).

`place` is CreateAgent's placement: the receiving node, unless the agent's `corral.node` label
names a node (that node, alive), or `*` (the least loaded).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from corral_server import errors
from corral_server.clock import Clock
from corral_server.cluster.leases import open_bucket, unanswered_retried
from corral_server.cluster.log import TOKEN, WRONG_LAST_SEQUENCE

log = logging.getLogger(__name__)

NODE_LABEL = "corral.node"  # CreateAgent's label naming the node to run the agent on
ANY_NODE = "*"  # as that label's value: the least loaded node


class UnknownNode(errors.InvalidArgument):
    reason = "UNKNOWN_NODE"


class NodeNotAlive(errors.FailedPrecondition):
    reason = "NODE_NOT_ALIVE"


class NodeIdTaken(Exception):
    """Another process registered under this node id and its entry is alive."""


@dataclass(frozen=True)
class Settings:
    bucket: str = "corral_nodes"
    replicas: int = 3
    duration_ms: int = 10_000  # an entry lives this long unless refreshed
    skew_ms: int = 1_000  # the leases' margin for clocks that differ between nodes


DEFAULTS = Settings()


@dataclass(frozen=True)
class NodeEntry:
    node: str
    address: str  # HOST:PORT of the node's gRPC port, as other nodes reach it
    agents: int
    expires_ms: int
    instance: str  # the registering process: tells two processes with one node id apart
    revision: int = 0


def encode(entry: NodeEntry) -> bytes:
    fields = {
        "address": entry.address,
        "agents": entry.agents,
        "expires_ms": entry.expires_ms,
        "instance": entry.instance,
    }
    return json.dumps(fields).encode()


def decode(node: str, value: bytes | None, revision: int) -> NodeEntry:
    fields = json.loads(value or b"{}")
    return NodeEntry(
        node,
        str(fields["address"]),
        int(fields["agents"]),
        int(fields["expires_ms"]),
        str(fields.get("instance", "")),
        revision,
    )


class NodeDirectory:
    """The directory as node `node` (reached at `address`) keeps and sees it."""

    def __init__(
        self,
        kv: KeyValue,
        node: str,
        address: str,
        clock: Clock,
        duration_ms: int,
        skew_ms: int,
    ) -> None:
        if not TOKEN.fullmatch(node):
            raise ValueError(f"node id {node!r}: letters, digits, '-' and '_' only")
        self._kv = kv
        self.bucket = ""  # its name, once opened
        self.node = node
        self.address = address
        self._clock = clock
        self.duration_ms = duration_ms
        self.skew_ms = skew_ms
        self._instance = secrets.token_hex(8)
        self._entries: dict[str, NodeEntry] = {}
        # Agents placed on a node since its entry last changed: counted at once, so a burst of
        # creates spreads out before the nodes' next refreshes report them.
        self._placed: dict[str, int] = {}
        self._revision = 0  # of this node's own entry, as this process last wrote it
        self._watcher: KeyValue.KeyWatcher | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        node: str,
        address: str,
        clock: Clock,
        settings: Settings = DEFAULTS,
    ) -> NodeDirectory:
        """The directory (the bucket made when missing), its copy loaded and followed. Its
        values age out after three durations of the servers' time: nodes long gone."""
        age_s = 3 * (settings.duration_ms + settings.skew_ms) / 1000
        kv = await open_bucket(js, settings.bucket, settings.replicas, age_s)
        directory = cls(kv, node, address, clock, settings.duration_ms, settings.skew_ms)
        directory.bucket = settings.bucket
        await directory._follow()
        return directory

    # --- look-ups (synchronous, from the local copy) ----------------------------------------

    def entry(self, node: str) -> NodeEntry | None:
        return self._entries.get(node)

    def nodes(self) -> tuple[NodeEntry, ...]:
        return tuple(sorted(self._entries.values(), key=lambda e: e.node))

    def address_of(self, node: str) -> str | None:
        entry = self._entries.get(node)
        return entry.address if entry is not None else None

    def alive(self, node: str) -> bool:
        """Whether `node` may still be running: before its expiry plus the skew margin."""
        entry = self._entries.get(node)
        return entry is not None and self._clock.now_ms() < entry.expires_ms + self.skew_ms

    def least_loaded(self) -> str:
        """The alive node running the fewest agents (this one on a tie, then by id)."""
        alive = [e for e in self._entries.values() if self.alive(e.node)] or [
            NodeEntry(self.node, self.address, 0, 0, self._instance)
        ]
        best = min(alive, key=lambda e: (self._load(e), e.node != self.node, e.node))
        return best.node

    def _load(self, entry: NodeEntry) -> int:
        return entry.agents + self._placed.get(entry.node, 0)

    def place(self, labels: Mapping[str, str]) -> str:
        """The node a new agent with `labels` runs on: the `corral.node` label's node, the
        least loaded for `*`, else this one. UnknownNode (INVALID_ARGUMENT) for a node the
        directory does not know; NodeNotAlive (FAILED_PRECONDITION) for one whose entry
        expired."""
        wanted = labels.get(NODE_LABEL, "")
        if wanted in ("", self.node):
            return self.node
        if wanted == ANY_NODE:
            chosen = self.least_loaded()
        elif wanted not in self._entries:
            known = ", ".join(e.node for e in self.nodes()) or "none"
            raise UnknownNode.field(
                f"labels[{NODE_LABEL}]", f"no node {wanted!r} in the cluster (nodes: {known})"
            )
        elif not self.alive(wanted):
            raise NodeNotAlive(
                f"node {wanted} is not alive (its entry expired): place the agent elsewhere, "
                f"or use {NODE_LABEL}={ANY_NODE}",
                metadata={"node": wanted},
            )
        else:
            chosen = wanted
        self._placed[chosen] = self._placed.get(chosen, 0) + 1
        return chosen

    # --- this node's entry --------------------------------------------------------------

    async def register(self, agents: int = 0) -> NodeEntry:
        """This node's entry, written for another duration from now. Raises NodeIdTaken when
        another process holds the id (its entry alive, or rewritten since this one wrote)."""
        entry = NodeEntry(
            self.node,
            self.address,
            agents,
            self._clock.now_ms() + self.duration_ms,
            self._instance,
        )
        try:
            if self._revision:
                revision = await unanswered_retried(
                    lambda: self._kv.update(self.node, encode(entry), last=self._revision)
                )
            else:
                revision = await self._claim(encode(entry))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise NodeIdTaken(f"node id {self.node}: another process registered it") from None
        self._revision = revision
        self._apply(self.node, encode(entry), revision)
        return self._entries[self.node]

    async def _claim(self, value: bytes) -> int:
        """The first write of this process: a new key, or over an entry that is this id's
        own earlier run (expired, left by a clean stop, or at this node's own address)."""
        try:
            # A bucket just made may not have its leader yet: no stream answers (tried again).
            return await unanswered_retried(lambda: self._kv.create(self.node, value))
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        current = await self._kv.get(self.node)
        held = decode(self.node, current.value, current.revision or 0)
        # An entry at this very address is this node's own crashed run: this process has
        # bound the address, so the one that registered it is gone (a restart at once).
        alive = self._clock.now_ms() < held.expires_ms + self.skew_ms
        if alive and held.address != self.address:
            raise NodeIdTaken(
                f"node id {self.node} is registered by another process at {held.address} "
                f"until {held.expires_ms}"
            )
        return await unanswered_retried(
            lambda: self._kv.update(self.node, value, last=held.revision)
        )

    def start(self, agents: Callable[[], int]) -> None:
        """Refresh this node's entry every third of its duration, with `agents()` then."""
        self._tasks.append(asyncio.create_task(self._refresh(agents), name="corral-node-entry"))

    async def _refresh(self, agents: Callable[[], int]) -> None:
        while True:
            await self._clock.sleep(self.duration_ms / 3000)
            try:
                await self.register(agents())
            except NodeIdTaken as taken:
                log.error("%s: this node stops refreshing its entry", taken)
                return
            except (nats.errors.Error, TimeoutError) as error:
                log.warning("node %s: refreshing its entry failed: %r", self.node, error)

    async def leave(self) -> None:
        """Stop refreshing and following, and remove this node's entry (a clean stop)."""
        await self.close()
        if self._revision:
            try:
                await self._kv.delete(self.node, last=self._revision)
            except nats.js.errors.APIError as error:
                if error.err_code != WRONG_LAST_SEQUENCE:
                    raise  # rewritten by another process since: its entry now, left alone
            self._revision = 0

    async def close(self) -> None:
        """Stop refreshing and following; the entry stays until it expires."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._watcher is not None:
            watcher, self._watcher = self._watcher, None
            with contextlib.suppress(nats.errors.Error):
                await watcher.stop()  # type: ignore[no-untyped-call]

    # --- the local copy -------------------------------------------------------------------

    async def _follow(self) -> None:
        """Load every entry, then follow the bucket's changes in the background."""
        self._watcher = watcher = await self._kv.watchall()
        while (entry := await watcher.updates(timeout=30)) is not None:  # type: ignore[no-untyped-call]
            self._applied(entry)
        self._tasks.append(asyncio.create_task(self._changes(watcher), name="corral-nodes"))

    async def _changes(self, watcher: KeyValue.KeyWatcher) -> None:
        async for entry in watcher:
            if entry is not None:
                self._applied(entry)

    def _applied(self, entry: KeyValue.Entry) -> None:
        if entry.operation in (KV_DEL, KV_PURGE):
            self._entries.pop(entry.key, None)
            self._placed.pop(entry.key, None)
        else:
            self._apply(entry.key, entry.value, entry.revision or 0)

    def _apply(self, node: str, value: bytes | None, revision: int) -> None:
        current = self._entries.get(node)
        if current is not None and current.revision >= revision:
            return  # the watch may bring back what this node wrote and applied already
        try:
            self._entries[node] = decode(node, value, revision)
        except (ValueError, KeyError, TypeError):
            log.warning("node directory: entry %s does not decode; ignored", node)
            return
        self._placed.pop(node, None)  # the node's own count includes them from now on
