"""How a run ends (docs/design.md#subagents): once, when its child first settles (completed -> OK,
failed -> ERROR after a grace, canceled -> KILLED), or as decided before (a run timeout:
TIMEOUT), or by a kill, an archive or a restart (the registry's other parts call `end`). The
result is the child's last reply of that turn, capped, with the turn's usage. Ending starts
the announce unless it is suppressed.

The error grace: a failure is held for `grace_s` (15 s) before it ends the run
as ERROR (ended at the failure's time). A success in between supersedes it: a completed turn
ends the run OK, a turn still running when the grace is over lets the run go on. A later
failure holds its own error for a new grace.

Every method that changes a run runs inside a job of the ledger.

Must not: change an agent except through the manager; import grpc or protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, assert_never

from corral_server.clock import TimerHandle
from corral_server.domain.agent import Agent
from corral_server.domain.events import TurnCanceled, TurnCompleted, TurnFailed, TurnTerminal
from corral_server.domain.subagents import (
    MAX_RESULT_CHARS,
    AnnounceState,
    Outcome,
    SubagentRun,
)
from corral_server.subagents.announce import Announcer
from corral_server.subagents.children import is_busy, last_reply, stop_child
from corral_server.subagents.core import RunCore


class RunEnding:
    def __init__(self, core: RunCore, announcer: Announcer) -> None:
        self._core = core
        self._announcer = announcer
        # How a run ends when its child next settles, decided before (a timeout).
        self.forced: dict[str, tuple[Outcome, str]] = {}
        self._timers: dict[str, TimerHandle] = {}
        # Runs a steer is replacing (steer.py): their end is not announced (unless the steer
        # fails and restores it).
        self.steering: set[str] = set()
        # The error grace: a child's failure ends its run only if no success follows within
        # `grace_s`: the error held meanwhile, and its timer.
        self._grace_s = core.limits.error_grace_s
        self._held: dict[str, _Held] = {}
        self._grace_timers: dict[str, TimerHandle] = {}

    def stop(self) -> None:
        for timer in (*self._timers.values(), *self._grace_timers.values()):
            timer.cancel()

    async def child_settled(self, run_id: str, agent: Agent, terminal: TurnTerminal) -> None:
        run = self._core.ledger.runs.get(run_id)
        if run is None or run.ended or run.child_agent_id not in ("", agent.id):
            return  # a later turn of the child, or not its run
        forced = self.forced.pop(run_id, None)
        outcome, reason = forced or outcome_of(terminal)
        fallback = terminal.error.message if isinstance(terminal, TurnFailed) else ""
        result = await last_reply(self._core.manager, agent.id, terminal.turn_id) or fallback
        usage = terminal.usage if isinstance(terminal, TurnCompleted) else None
        announce = run_id not in self.steering
        run = replace(run, child_agent_id=agent.id)
        if outcome is Outcome.ERROR and announce and self._grace_s > 0:
            self._hold_error(run, _Held(reason, result, self._core.clock.now_ms()))
            return
        self.end(run, outcome, reason, result, usage, announce=announce)

    def end(
        self,
        run: SubagentRun,
        outcome: Outcome,
        reason: str,
        result: str = "",
        usage: Any = None,
        announce: bool = True,
        ended_at_ms: int | None = None,
    ) -> SubagentRun:
        for timers in (self._timers, self._grace_timers):
            timer = timers.pop(run.run_id, None)
            if timer is not None:
                timer.cancel()
        self._held.pop(run.run_id, None)  # an error held in its grace is superseded
        now = self._core.clock.now_ms()
        ended_at = ended_at_ms if ended_at_ms is not None else now
        ended = replace(
            run,
            started_at_ms=run.started_at_ms or ended_at,
            ended_at_ms=ended_at,
            outcome=outcome,
            end_reason=reason,
            result_text=result[:MAX_RESULT_CHARS],
            usage=usage or run.usage,
            announce_state=AnnounceState.PENDING if announce else AnnounceState.SUPPRESSED,
            announced_at_ms=None if announce else now,
        )
        self._core.ledger.put(ended)
        if announce:
            self._announcer.start(run.run_id)
        return ended

    # --- the error grace -------------------------------------------------------------------

    def _hold_error(self, run: SubagentRun, held: _Held) -> None:
        """The child's turn failed: the run ends ERROR only if no success follows within
        the grace. A later failure holds its own error for a new grace (a turn started in
        between: the earlier error was cancelled by that start)."""
        run_id = run.run_id
        timer = self._grace_timers.pop(run_id, None)
        if timer is not None:
            timer.cancel()
        self._held[run_id] = held
        self._grace_timers[run_id] = self._core.clock.call_later(
            self._grace_s, lambda: self._core.ledger.post(lambda: self._confirm_error(run_id))
        )

    async def _confirm_error(self, run_id: str) -> None:
        self._grace_timers.pop(run_id, None)
        held = self._held.pop(run_id, None)
        run = self._core.ledger.runs.get(run_id)
        if held is None or run is None or run.ended:
            return
        if is_busy(self._core.manager, run.child_agent_id):
            return  # a turn started within the grace: the error is cancelled; its settle ends
        self.end(run, Outcome.ERROR, held.reason, held.result, ended_at_ms=held.at_ms)

    # --- run timeouts ------------------------------------------------------------------------

    def arm_timeout(self, run: SubagentRun) -> None:
        started = run.started_at_ms or run.created_at_ms
        left_s = max(0.0, (started + run.run_timeout_s * 1000 - self._core.clock.now_ms()) / 1000)
        run_id = run.run_id
        self._timers[run_id] = self._core.clock.call_later(
            left_s, lambda: self._core.ledger.post(lambda: self._timed_out(run_id))
        )

    async def _timed_out(self, run_id: str) -> None:
        self._timers.pop(run_id, None)
        run = self._core.ledger.runs.get(run_id)
        if run is None or run.ended or not run.child_agent_id:
            return
        reason = f"timeout after {run.run_timeout_s} s"
        held = self._held.get(run_id)
        if held is not None:  # the child is not running: no settle would come
            self.end(run, Outcome.TIMEOUT, reason, held.result)
            return
        self.forced[run_id] = (Outcome.TIMEOUT, reason)
        self._core.ledger.in_background(stop_child(self._core.manager, run.child_agent_id))


@dataclass(frozen=True, slots=True)
class _Held:
    """A child's error in its grace: how the run ends if nothing succeeds, and when."""

    reason: str
    result: str
    at_ms: int


def outcome_of(terminal: TurnTerminal) -> tuple[Outcome, str]:
    match terminal:
        case TurnCompleted():
            return Outcome.OK, "complete"
        case TurnFailed(error=error):
            return Outcome.ERROR, f"error: {error.message}"[:500]
        case TurnCanceled(reason=reason):
            return Outcome.KILLED, f"canceled: {reason}"[:500] if reason else "canceled"
        case _:
            assert_never(terminal)
