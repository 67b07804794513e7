"""Queries over the run tree (docs/design.md#subagents): pure functions of a set of runs.

The tree is given by the runs themselves: a run links its requester (parent) to its child, so
an agent's descendants are found breadth first from the runs it requested, then the runs its
children requested, and so on. A visited set guards against cycles (a child that, through
some odd history, is also an ancestor): every agent is expanded once, every run visited once.

Must not: change anything (the registry is the only writer), or await.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from corral_server.domain.subagents import SubagentRun

Visitor = Callable[[SubagentRun], None]


class RunIndex:
    """The runs grouped by requester, built once per query (runs are few: thousands)."""

    def __init__(self, runs: Iterable[SubagentRun]) -> None:
        self.by_requester: Final[dict[str, list[SubagentRun]]] = {}
        self.all: Final[list[SubagentRun]] = list(runs)
        for run in self.all:  # creation order within each requester
            self.by_requester.setdefault(run.requester_agent_id, []).append(run)


def for_each_descendant(index: RunIndex, root_agent_id: str, visit: Visitor) -> None:
    """Visit every run below `root_agent_id`, breadth first, each child once (a cycle guard)."""
    pending = [root_agent_id]
    visited = {root_agent_id}
    for requester in pending:  # the list grows while it is walked: a BFS queue
        for run in index.by_requester.get(requester, ()):
            visit(run)
            child = run.child_agent_id
            if child and child not in visited:
                visited.add(child)
                pending.append(child)


def descendant_runs(index: RunIndex, root_agent_id: str) -> list[SubagentRun]:
    found: list[SubagentRun] = []
    for_each_descendant(index, root_agent_id, found.append)
    return found


def count_active_descendants(index: RunIndex, root_agent_id: str) -> int:
    """Runs below the agent that have not ended."""
    return sum(1 for run in descendant_runs(index, root_agent_id) if not run.ended)


def count_pending_descendants(
    index: RunIndex, root_agent_id: str, excluding_run_id: str = ""
) -> int:
    """Runs below the agent not ended or not yet announced (pending), optionally
    without one run (a run asking about its own child's subtree must not count itself)."""
    return sum(
        1
        for run in descendant_runs(index, root_agent_id)
        if run.pending and run.run_id != excluding_run_id
    )


def runs_for_requester(
    index: RunIndex,
    requester_agent_id: str,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[SubagentRun]:
    """The agent's direct child runs, optionally created within [since_ms, until_ms)."""
    return [
        run
        for run in index.by_requester.get(requester_agent_id, ())
        if (since_ms is None or run.created_at_ms >= since_ms)
        and (until_ms is None or run.created_at_ms < until_ms)
    ]


def runs_for_controller(index: RunIndex, controller_agent_id: str) -> list[SubagentRun]:
    return [run for run in index.all if run.controller_agent_id == controller_agent_id]


def active_children(index: RunIndex, requester_agent_id: str) -> int:
    """Direct child runs not ended (the children limit counts these, claimed slots included)."""
    return sum(1 for run in index.by_requester.get(requester_agent_id, ()) if not run.ended)


def run_of_child(index: RunIndex, child_agent_id: str) -> SubagentRun | None:
    """The newest run whose child is the agent (a steered child has had several)."""
    found: SubagentRun | None = None
    for run in index.all:
        if run.child_agent_id == child_agent_id:
            found = run
    return found


def requester_of(index: RunIndex, child_agent_id: str) -> str | None:
    """Who asked for the agent: the requester of the run it works for."""
    run = run_of_child(index, child_agent_id)
    return None if run is None else run.requester_agent_id


def depth_of(index: RunIndex, agent_id: str) -> int:
    """0 for an agent no run created; a child's run depth otherwise."""
    run = run_of_child(index, agent_id)
    return 0 if run is None else run.depth
