"""The directory of agents: which agents exist (live actors and closed records, in creation
order), looking one up by id, listing them a page at a time, and the tree the parent label
draws (cascades walk it).

Must not: change an agent (every change is a call onto its actor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from corral_server import errors
from corral_server.domain.agent import PARENT_AGENT_ID_LABEL, Agent
from corral_server.manager.actor import AgentActor
from corral_server.manager.selector import parse_selector
from corral_server.manager.specs import ListQuery
from corral_server.manager.validate import Limits

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class RemoteAgentsView(Protocol):
    """A cluster node's read model of the agents other nodes own (cluster/remote_agents.py):
    listed and read here, changed only by their owner."""

    def get(self, agent_id: str) -> Agent | None: ...

    def owner(self, agent_id: str) -> str: ...

    def agents(self) -> list[Agent]: ...


class AgentDirectory:
    def __init__(self, limits: Limits, remote: RemoteAgentsView | None = None) -> None:
        self._limits = limits
        self.actors: dict[str, AgentActor] = {}  # insertion order = creation order
        self._remote = remote

    def add(self, actor: AgentActor) -> None:
        self.actors[actor.agent.id] = actor

    def remove(self, agent_id: str) -> None:
        self.actors.pop(agent_id, None)

    def find(self, agent_id: str) -> AgentActor | None:
        return self.actors.get(agent_id)

    def actor(self, agent_id: str) -> AgentActor:
        """The agent's actor; a missing or malformed id is the caller's error."""
        if not agent_id:
            raise errors.InvalidArgument.field("agent_id", "required")
        if len(agent_id) > self._limits.max_id_chars:
            raise errors.InvalidArgument.field(
                "agent_id", f"at most {self._limits.max_id_chars} chars"
            )
        actor = self.actors.get(agent_id)
        if actor is None:
            if self._remote is not None and self._remote.get(agent_id) is not None:
                raise errors.AgentOwnedElsewhere(agent_id, self._remote.owner(agent_id))
            raise errors.AgentNotFound(agent_id)
        return actor

    def agent(self, agent_id: str) -> Agent:
        """The agent's snapshot: its actor's here, or another node's from the read model."""
        actor = self.actors.get(agent_id)
        if actor is not None:
            return actor.agent
        remote = self._remote.get(agent_id) if self._remote is not None else None
        return remote if remote is not None else self.actor(agent_id).agent

    def open_actors(self, agent_ids: Sequence[str]) -> list[AgentActor]:
        """The actors of `agent_ids`, each checked (known, not closed) before any is
        returned: a request that fails on one changes none."""
        if not agent_ids:
            raise errors.InvalidArgument.field("agent_ids", "name at least one agent")
        actors = [self.actor(agent_id) for agent_id in agent_ids]
        for actor in actors:
            if actor.agent.is_closed:
                raise errors.AgentClosed(actor.agent.id)
        return actors

    def agents(self) -> list[Agent]:
        if self._remote is not None:
            return list(self._listing().values())
        return [actor.agent for actor in self.actors.values()]

    def _listing(self) -> dict[str, Agent]:
        """With other nodes' agents beside this one's: every agent by id, ordered by creation
        time then id, the same order on every node."""
        here = {agent_id: actor.agent for agent_id, actor in self.actors.items()}
        others = [a for a in self._remote.agents() if a.id not in here] if self._remote else []
        every = sorted([*here.values(), *others], key=lambda a: (a.created_at_ms, a.id))
        return {agent.id: agent for agent in every}

    def snapshot(self, agent_ids: frozenset[str]) -> list[Agent]:
        """Every agent in scope (empty = all), for a fresh subscription."""
        if agent_ids and self._remote is not None:
            return [a for i, a in self._listing().items() if i in agent_ids]
        if agent_ids:
            return [a.agent for i, a in self.actors.items() if i in agent_ids]
        return self.agents()

    def page(self, query: ListQuery) -> tuple[list[Agent], str]:
        """Agents in creation order. The token is the id of the last agent of the previous
        page, so a page stays correct while agents are created behind it."""
        selector = parse_selector(query.label_selector)
        size = query.page_size or DEFAULT_PAGE_SIZE
        page_token = query.page_token
        if size > MAX_PAGE_SIZE:
            raise errors.InvalidArgument.field("page_size", f"at most {MAX_PAGE_SIZE}")
        listing = self._listing() if self._remote is not None else None
        ids = list(self.actors if listing is None else listing)
        start = 0
        if page_token:
            if page_token not in (self.actors if listing is None else listing):
                raise errors.InvalidArgument.field("page_token", "unknown or expired page token")
            start = ids.index(page_token) + 1
        out: list[Agent] = []
        for agent_id in ids[start:]:
            agent = self.actors[agent_id].agent if listing is None else listing[agent_id]
            if agent.archived_at_ms is not None and not query.include_archived:
                continue
            if query.parent_agent_id and agent.parent_agent_id != query.parent_agent_id:
                continue
            if not selector.matches(agent.labels):
                continue
            if len(out) == size:
                return out, out[-1].id
            out.append(agent)
        return out, ""

    def with_descendants(self, agent_id: str) -> list[str]:
        """`agent_id` and its descendants by the parent label, breadth first, each once."""
        children: dict[str, list[str]] = {}
        for other_id, actor in self.actors.items():
            parent = actor.agent.parent_agent_id
            if parent:
                children.setdefault(parent, []).append(other_id)
        order, seen = [agent_id], {agent_id}
        for current in order:
            for child in children.get(current, ()):
                if child not in seen:
                    seen.add(child)
                    order.append(child)
        return order

    def check_parent(self, labels: Mapping[str, str], agent_id: str | None) -> None:
        """The parent label must name another existing agent and must not close a cycle:
        cascades (archive, kill) walk this tree."""
        parent = labels.get(PARENT_AGENT_ID_LABEL)
        if parent is None:
            return
        field = f"labels[{PARENT_AGENT_ID_LABEL!r}]"
        if parent not in self.actors:
            raise errors.InvalidArgument.field(field, "must name an existing agent")
        seen: set[str] = set()
        cursor: str = parent
        while cursor and cursor not in seen:
            if cursor == agent_id:
                raise errors.InvalidArgument.field(field, "an agent cannot descend from itself")
            seen.add(cursor)
            ancestor = self.actors.get(cursor)
            cursor = ancestor.agent.parent_agent_id if ancestor is not None else ""
