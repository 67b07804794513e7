"""Kill and archive (docs/design.md#subagents): runs end KILLED with their announces
suppressed, then their children are stopped (queues cleared, turns interrupted).

Marking comes first, in one job, so nothing in a subtree announces while it is being stopped.

Must not: change an agent except through the manager; import grpc or protobuf.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from corral_server.domain.subagents import AnnounceState, Outcome, SubagentRun
from corral_server.jobs import done_with
from corral_server.subagents import queries as q
from corral_server.subagents.announce import Announcer
from corral_server.subagents.children import stop_child
from corral_server.subagents.core import RunCore
from corral_server.subagents.ending import RunEnding


class RunControl:
    def __init__(self, core: RunCore, ending: RunEnding, announcer: Announcer) -> None:
        self._core = core
        self._ending = ending
        self._announcer = announcer

    async def kill(self, run_id: str, cascade: bool) -> list[str]:
        """End the run (and with `cascade` every run below it) as KILLED, announces
        suppressed, then stop their children: queues cleared, turns interrupted."""
        killed = await self._core.ledger.call(lambda: self._mark_killed(run_id, cascade))
        await asyncio.gather(*(stop_child(self._core.manager, r.child_agent_id) for r in killed))
        return [r.run_id for r in killed]

    async def _mark_killed(self, run_id: str, cascade: bool) -> list[SubagentRun]:
        run = self._core.ledger.get(run_id)
        marked = [run]
        if cascade and run.child_agent_id:
            marked.extend(q.descendant_runs(self._core.ledger.index(), run.child_agent_id))
        return self.suppress(marked, "killed")

    def suppress(self, runs: list[SubagentRun], reason: str) -> list[SubagentRun]:
        """Runs not ended end KILLED; every announce not finished is suppressed. Returns the
        runs this ended (their children still have to be stopped)."""
        killed: list[SubagentRun] = []
        now = self._core.clock.now_ms()
        for run in runs:
            run = self._core.ledger.runs[run.run_id]
            self._ending.steering.discard(run.run_id)  # a steer under way does not restore it
            if not run.ended:
                self._ending.forced.pop(run.run_id, None)
                killed.append(self._ending.end(run, Outcome.KILLED, reason, announce=False))
            elif not run.announce_state.finished:
                self._core.ledger.put(
                    replace(run, announce_state=AnnounceState.SUPPRESSED, announced_at_ms=now)
                )
        self._announcer.kick()
        return killed

    async def on_archive(self, members: list[str]) -> None:
        """Before an archive closes `members`: their runs end KILLED, unannounced (the
        archive itself closes the children)."""
        if self._core.ledger.stopped:
            return
        wanted = set(members)
        await self._core.ledger.call(
            lambda: done_with(
                self.suppress(
                    [r for r in self._core.ledger.runs.values() if r.child_agent_id in wanted],
                    "requester archived",
                )
            )
        )
