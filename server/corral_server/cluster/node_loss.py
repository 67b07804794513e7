"""Node loss (docs/cluster.md#node-loss): the agents of a node that died are taken over by
another node and shown `errored` with NODE_LOST everywhere.

Every node watches the leases (node.py keeps the latest value of each key). An agent whose
lease expired (its expiry plus the skew margin passed on this node's clock) while its holder's
entry in the node directory expired too, is an agent whose node is gone: its process died
with it. Each node that sees one tries to take its lease; the compare-and-set lets one node
win however many notice. The winner becomes the agent's owner of record: its channel claims
the subject (fencing anything the dead node had in flight), it waits until its read model has
applied everything before the claim, restores the agent from its record (the manager's
`adopt`) and its actor writes the errored snapshot through the stream, once. Queued prompts
and the timeline are in the stream already: nothing else moves. A ReloadAgent then starts
the agent's provider on its new owner (or on the node it names, rpc reload).

A clean stop gives its leases up (deleted keys): nothing is lost then, and the node takes its
agents back when it starts again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from corral_server.cluster.leases import Holder, Lease, LeaseHeld
from corral_server.domain.agent import Agent, AgentError, Errored

if TYPE_CHECKING:
    from corral_server.cluster.node import ClusterNode

log = logging.getLogger(__name__)

NODE_LOST = "NODE_LOST"
WRITER_FAILED = "WRITER_FAILED"  # as manager/actor_ending.py names it

# The manager's hooks: restore the agent here, errored with the reason (False if it could
# not); stop the agent's actor here, whatever it was doing (its writes stopped).
Adopt = Callable[[Agent, AgentError | None], Awaitable[bool]]
Drop = Callable[[str], Awaitable[None]]
ErrorOf = Callable[[Agent], AgentError | None]


def node_lost(node: str) -> AgentError:
    return AgentError(
        f"node {node} was lost: the agent's process died with it (ReloadAgent starts it again)",
        NODE_LOST,
    )


class NodeLoss:
    def __init__(self, node: ClusterNode, adopt: Adopt, drop: Drop) -> None:
        self._node = node
        self._adopt = adopt
        self._drop = drop
        self._orphans: set[str] = set()  # dropped here, the lease not taken back yet
        self.sweeps = 0  # how many sweeps ended (their takeovers included): for tests

    async def run(self) -> None:
        """A sweep every third of a lease duration, on the node's clock."""
        node = self._node
        period_s = node.leases.duration_ms / 3000
        while True:
            await node.clock.sleep(period_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %s: the sweep for lost nodes failed", node.node_id)
            self.sweeps += 1

    def lost(self) -> list[tuple[str, Holder]]:
        """The agents whose lease and whose holder's node entry both expired."""
        node = self._node
        now_ms, skew_ms = node.clock.now_ms(), node.leases.skew_ms
        found = []
        for agent_id, holder in list(node.leased.items()):
            if holder.node == node.node_id or agent_id in node.channels:
                continue
            if now_ms < holder.expires_ms + skew_ms or node.directory.alive(holder.node):
                continue
            record = node.agents.record(agent_id)
            if record is not None and not record.is_closed:
                found.append((agent_id, holder))
        return found

    async def sweep(self) -> int:
        """Mend this node's broken channels, then take over every lost agent this node can;
        how many it took."""
        await self.mend()
        taken = 0
        for agent_id, holder in self.lost():
            taken += await self.take_over(agent_id, holder.node)
        return taken

    async def mend(self) -> None:
        """An agent of this node whose channel broke (its lease lost or expired, the stream
        failed past its lease, an entry too big) is stopped here (its process too) and taken
        back from the stream when its lease is to be had: restored from its last record,
        errored with why its writes stopped, and writable again. When another node took it,
        it is listed from the read model as that node wrote it (NODE_LOST)."""
        node = self._node
        if node.stopping:  # its channels close: not broken
            return
        for agent_id, channel in list(node.channels.items()):
            if channel.broken is not None and agent_id in node.agents.local:
                why = channel.broken.message
                await self._drop(agent_id)
                await node.release(agent_id)
                self._orphans.add(agent_id)
                log.warning("agent %s: stopped here, its writes stopped: %s", agent_id, why)
        for agent_id in sorted(self._orphans):
            try:
                lease = await node.leases.acquire(agent_id)
            except LeaseHeld:
                self._orphans.discard(agent_id)  # another node's now
                continue
            except Exception as error:  # NATS still out of reach: at the next sweep
                log.info("agent %s: its lease not taken back yet: %r", agent_id, error)
                continue
            self._orphans.discard(agent_id)
            await take(node, lease, self._adopt, partial(_stopped, node.node_id))

    async def take_over(self, agent_id: str, lost_node: str) -> bool:
        try:
            lease = await self._node.leases.acquire(agent_id)
        except LeaseHeld:
            return False  # another node was first
        return await take(self._node, lease, self._adopt, partial(_lost_with, lost_node))


async def take(node: ClusterNode, lease: Lease, adopt: Adopt, error_of: ErrorOf) -> bool:
    """The agent of `lease` (just taken by this node) made this node's: its subject claimed,
    the read model caught up to the claim (the previous owner's last writes in it), the
    agent restored from its record (errored with `error_of(record)` unless None). False, the
    lease given up again, when any of it failed (logged)."""
    agent_id = lease.agent
    channel = node.open_channel(agent_id, lease)
    try:
        claimed = await channel.claimed
        await node.applied(claimed)
        record = node.agents.record(agent_id)
        if record is None:
            raise LookupError(f"agent {agent_id}: no record in the read model")
        node.agents.local.add(agent_id)
        if await adopt(record, error_of(record)):
            log.warning("agent %s: taken over by this node", agent_id)
            return True
    except Exception:
        log.exception("agent %s: the takeover failed", agent_id)
    await node.release(agent_id)
    return False


def _lost_with(node: str, agent: Agent) -> AgentError | None:
    """NODE_LOST, unless the agent says so already (the node that took it over died too)."""
    lifecycle = agent.lifecycle
    if isinstance(lifecycle, Errored) and lifecycle.error.code == NODE_LOST:
        return None
    return node_lost(node)


def no_error(agent: Agent) -> AgentError | None:
    return None


def _stopped(node: str, agent: Agent) -> AgentError:
    return AgentError(
        f"node {node} stopped writing the agent (it lost its lease or the stream) and "
        "stopped its process; ReloadAgent starts it again",
        WRITER_FAILED,
    )
