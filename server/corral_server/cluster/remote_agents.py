"""A node's read model of the agents: the latest record of every agent in the stream (the owner
included), who claimed each last, and who holds each lease now (a watch of the leases' bucket).
The manager's directory lists and reads other nodes' agents from here; `owner_of` answers the
forwarding of calls that change them. Every look-up is a dictionary read: cheap, synchronous.
"""

from __future__ import annotations

from corral_server.domain.agent import Agent


class RemoteAgents:
    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._agents: dict[str, Agent] = {}
        self.claims: dict[str, str] = {}  # agent -> the node of its last claim in the stream
        self.holders: dict[str, str] = {}  # agent -> the node holding its lease (the watch)
        self.local: set[str] = set()  # the agents this node runs (its actors)

    def put(self, agent: Agent) -> None:
        self._agents[agent.id] = agent

    def remove(self, agent_id: str) -> None:
        self._agents.pop(agent_id, None)

    def get(self, agent_id: str) -> Agent | None:
        return None if agent_id in self.local else self._agents.get(agent_id)

    def record(self, agent_id: str) -> Agent | None:
        """The agent's latest record in the stream, whoever owns it."""
        return self._agents.get(agent_id)

    def agents(self) -> list[Agent]:
        return [agent for agent_id, agent in self._agents.items() if agent_id not in self.local]

    def owner(self, agent_id: str) -> str:
        """The node that owns the agent: its lease's holder, else its last claim's ("")."""
        return self.holders.get(agent_id) or self.claims.get(agent_id, "")

    def owner_of(self, agent_id: str) -> str | None:
        """For forwarding: the node to send a change of the agent to; None when this node
        owns it or no node is known to."""
        if agent_id in self.local:
            return None
        node = self.owner(agent_id)
        return None if not node or node == self.node_id else node
