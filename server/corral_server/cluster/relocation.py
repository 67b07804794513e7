"""ReloadAgent on a cluster (docs/cluster.md#node-loss): the agent's provider restarted on the
node the call names (`node`), or, without one, where forwarding sends it: its owner, which
takes the agent back itself when no live node holds its lease.

The call reaches the agent's owner first (forwarding, like any change). An owner asked to
restart it elsewhere checks the node exists and is alive, releases the agent (its turn
canceled, its provider session closed, its last writes appended, its lease given up) and
answers AGENT_OWNED_ELSEWHERE naming the target, which the forwarding relays the call to
(rpc/forwarding.py: a ReloadAgent is relayed to the node it names even when forwarded once).
The target, owning nothing, takes the free (or expired) lease, claims the subject, restores the
agent from its record once its read model has applied everything before the claim, and
restarts its provider there, resuming the provider session where the provider can: the
agent's timeline continues in the one stream, the same order on every node.

The agent's cwd must exist on the target (else FAILED_PRECONDITION / `CWD_MISSING`; checked by
the target, after the owner let go: the agent then has no owner until a ReloadAgent names a
node that has the directory).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from corral_server import errors
from corral_server.cluster.leases import LeaseHeld
from corral_server.cluster.node_loss import no_error, take
from corral_server.cluster.nodes import NodeNotAlive, UnknownNode
from corral_server.domain.agent import Agent, AgentError

if TYPE_CHECKING:
    from corral_server.cluster.node import ClusterNode


class Manager(Protocol):
    """What of the agent manager a relocation uses (the manager is a layer above)."""

    def get(self, agent_id: str) -> Agent: ...

    async def reload(self, agent_id: str, rehydrate: bool) -> Agent: ...

    async def release(self, agent_id: str) -> Agent: ...

    async def adopt(self, agent: Agent, error: AgentError | None) -> bool: ...


class CwdMissing(errors.FailedPrecondition):
    reason = "CWD_MISSING"


class Relocation:
    def __init__(self, node: ClusterNode, manager: Manager) -> None:
        self._node = node
        self._manager = manager

    async def reload(self, agent_id: str, rehydrate: bool, target: str) -> Agent:
        node, manager = self._node, self._manager
        here = node.node_id
        target = target or here
        if target != here:
            self._check_alive(target)
        if agent_id in node.channels:  # this node runs it
            if target == here:
                _check_cwd(manager.get(agent_id), here)
                return await manager.reload(agent_id, rehydrate)
            await manager.release(agent_id)
            await node.release(agent_id)
            raise errors.AgentOwnedElsewhere(agent_id, target, f"handed to node {target}")
        holder = await node.leases.holder(agent_id)
        now_ms = node.clock.now_ms()
        if holder is not None and now_ms < holder.expires_ms + node.leases.skew_ms:
            raise errors.AgentOwnedElsewhere(agent_id, holder.node)  # a live owner: there
        if target != here:
            raise errors.AgentOwnedElsewhere(agent_id, target, "nobody owns it")
        record = node.agents.record(agent_id)
        if record is None:
            raise errors.AgentNotFound(agent_id)
        _check_cwd(record, here)
        await self._take(agent_id)
        return await manager.reload(agent_id, rehydrate)

    async def _take(self, agent_id: str) -> None:
        node = self._node
        try:
            lease = await node.leases.acquire(agent_id)
        except LeaseHeld as held:
            raise errors.AgentOwnedElsewhere(agent_id, held.node) from None
        if not await take(node, lease, self._manager.adopt, no_error):
            raise errors.FailedPrecondition(
                f"node {node.node_id} could not restore agent {agent_id} (its log says why)",
                metadata={"agent_id": agent_id, "node": node.node_id},
            )

    def _check_alive(self, target: str) -> None:
        directory = self._node.directory
        known = [entry.node for entry in directory.nodes()]
        if target not in known:
            raise UnknownNode.field(
                "node", f"no node {target!r} in the cluster (nodes: {', '.join(known) or 'none'})"
            )
        if not directory.alive(target):
            raise NodeNotAlive(
                f"node {target} is not alive (its entry expired)", metadata={"node": target}
            )


def _check_cwd(agent: Agent, here: str) -> None:
    if not os.path.isdir(agent.cwd):
        raise CwdMissing(
            f"the agent's cwd {agent.cwd!r} does not exist on node {here}",
            metadata={"agent_id": agent.id, "node": here, "cwd": agent.cwd},
        )
