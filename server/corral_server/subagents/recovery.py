"""Restart recovery (docs/design.md#resume): after the agents are restored, every run not ended is
decided from its child's state, never resurrected; announces that were due resume.

Runs inside one job of the ledger.

Must not: change an agent; import grpc or protobuf.
"""

from __future__ import annotations

from corral_server import errors
from corral_server.domain.agent import Errored
from corral_server.domain.subagents import Outcome, SubagentRun
from corral_server.subagents.announce import Announcer
from corral_server.subagents.children import is_busy
from corral_server.subagents.core import RunCore
from corral_server.subagents.ending import RunEnding


class RunRecovery:
    def __init__(self, core: RunCore, ending: RunEnding, announcer: Announcer) -> None:
        self._core = core
        self._ending = ending
        self._announcer = announcer

    async def recover(self) -> None:
        for run in list(self._core.ledger.runs.values()):
            if not run.ended:
                self._recover_running(run)
            elif not run.announce_state.finished:
                self._announcer.start(run.run_id)

    def _recover_running(self, run: SubagentRun) -> None:
        end = self._ending.end
        if not run.child_agent_id:
            end(run, Outcome.UNKNOWN, "orphaned: the daemon stopped before the child started")
            return
        try:
            child = self._core.manager.get(run.child_agent_id)
        except errors.AgentNotFound:
            end(run, Outcome.UNKNOWN, "orphaned: the child agent no longer exists")
            return
        if is_busy(self._core.manager, child.id):
            if run.run_timeout_s:
                self._ending.arm_timeout(run)
            return  # its settle ends it
        if child.is_closed:
            end(run, Outcome.KILLED, "orphaned: the child agent was closed")
        elif child.last_error is not None and child.last_error.code == "DAEMON_RESTARTED":
            end(run, Outcome.ERROR, "error: interrupted by a daemon restart")
        elif isinstance(child.lifecycle, Errored):  # its error was in its grace (5.6)
            end(run, Outcome.ERROR, f"error: {child.lifecycle.error.message}"[:500])
        else:
            end(run, Outcome.UNKNOWN, "orphaned: the child settled across a daemon restart")
