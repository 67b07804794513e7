"""The run tree queries (docs/design.md#subagents): BFS with a cycle guard, counts, lookups."""

from __future__ import annotations

from dataclasses import replace

from corral_server.domain.subagents import AnnounceState, Outcome, RunId, SubagentRun
from corral_server.subagents import queries as q


def run(run_id: str, requester: str, child: str, created_ms: int = 0, **kw: object) -> SubagentRun:
    base = SubagentRun(RunId(run_id), child, requester, requester, "task", created_ms, 1)
    return replace(base, **kw)  # type: ignore[arg-type]


def ended(value: SubagentRun, state: AnnounceState = AnnounceState.DELIVERED) -> SubagentRun:
    return replace(value, ended_at_ms=1, outcome=Outcome.OK, announce_state=state)


TREE = [
    run("r1", "root", "a", 10),
    run("r2", "root", "b", 20),
    run("r3", "a", "c", 30),
    run("r4", "c", "d", 40),
    run("r5", "other", "x", 50, controller_agent_id="root"),
]


def test_descendants_are_found_breadth_first() -> None:
    index = q.RunIndex(TREE)
    assert [r.run_id for r in q.descendant_runs(index, "root")] == ["r1", "r2", "r3", "r4"]
    assert [r.run_id for r in q.descendant_runs(index, "a")] == ["r3", "r4"]
    assert q.descendant_runs(index, "d") == []


def test_a_cycle_visits_every_run_once_and_ends() -> None:
    cyclic = [run("r1", "a", "b"), run("r2", "b", "c"), run("r3", "c", "a")]
    found = q.descendant_runs(q.RunIndex(cyclic), "a")
    assert [r.run_id for r in found] == ["r1", "r2", "r3"]


def test_active_and_pending_counts_and_the_count_without_one_run() -> None:
    runs = [
        ended(TREE[0]),  # done and announced: neither
        ended(TREE[1], AnnounceState.DEFERRED),  # ended, announce pending: pending only
        TREE[2],  # running: both
        ended(TREE[3], AnnounceState.SUPPRESSED),
    ]
    index = q.RunIndex(runs)
    assert q.count_active_descendants(index, "root") == 1
    assert q.count_pending_descendants(index, "root") == 2
    assert q.count_pending_descendants(index, "root", excluding_run_id="r3") == 1


def test_direct_children_in_a_time_window_controller_runs_and_requesters() -> None:
    index = q.RunIndex(TREE)
    assert [r.run_id for r in q.runs_for_requester(index, "root")] == ["r1", "r2"]
    assert [r.run_id for r in q.runs_for_requester(index, "root", 15, 25)] == ["r2"]
    assert [r.run_id for r in q.runs_for_controller(index, "root")] == ["r1", "r2", "r5"]
    assert q.requester_of(index, "c") == "a"
    assert q.requester_of(index, "root") is None
    assert q.active_children(index, "root") == 2
    assert q.depth_of(index, "root") == 0
