"""The announce outbox's state changes (announce.Outbox): what the announcer should do next
for a run, and what became of an attempt. Each call is one job of the ledger; the announcer
does the slow part (writing the notice) off the queue.

Must not: write to an agent (the announcer does, through the manager); import grpc or
protobuf.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from corral_server import errors
from corral_server.domain.subagents import (
    MAX_RESULT_CHARS,
    AnnounceState,
    Delivering,
    SubagentRun,
)
from corral_server.domain.timeline import SubagentNotice
from corral_server.subagents import queries as q
from corral_server.subagents.announce import Deliver, Finished, Step, Wait, notice_text, wake_prompt
from corral_server.subagents.children import is_busy, last_reply
from corral_server.subagents.core import RunCore

log = logging.getLogger(__name__)


class RunOutbox:
    def __init__(self, core: RunCore) -> None:
        self._core = core

    async def announce_step(self, run_id: str) -> Step:
        return await self._core.ledger.call(lambda: self._announce_step(run_id))

    async def announce_delivered(self, run_id: str) -> None:
        await self._core.ledger.call(lambda: self._finish_announce(run_id, AnnounceState.DELIVERED))

    async def announce_failed(self, run_id: str, why: str, permanent: bool) -> float | None:
        return await self._core.ledger.call(lambda: self._announce_failed(run_id, why, permanent))

    async def _announce_step(self, run_id: str) -> Step:
        run = self._core.ledger.runs.get(run_id)
        if run is None or not run.ended or run.announce_state.finished:
            return Finished()
        now = self._core.clock.now_ms()
        pending = 0
        if run.child_agent_id:
            pending = q.count_pending_descendants(self._core.ledger.index(), run.child_agent_id)
        waiting = pending > 0 or is_busy(self._core.manager, run.child_agent_id)
        since = run.deferred_since_ms if run.deferred_since_ms is not None else now
        note = ""
        if waiting:
            if now - since < self._core.limits.defer_limit_s * 1000:
                if run.announce_state is not AnnounceState.DEFERRED:
                    self._core.ledger.put(
                        replace(run, announce_state=AnnounceState.DEFERRED, deferred_since_ms=since)
                    )
                return Wait()
            note = (
                f"announced after waiting {self._core.limits.defer_limit_s / 60:g} min; "
                f"{pending} descendant runs were still pending"
            )
        result = run.result_text
        # The child may have answered its children's notices since its run ended: while this
        # announce waited for them, or before its first step when they were quick (then nothing
        # was pending any more, but the answer came after the result was taken).
        had_children = bool(run.child_agent_id) and bool(
            q.descendant_runs(self._core.ledger.index(), run.child_agent_id)
        )
        if run.deferred_since_ms is not None or had_children:
            reply = await last_reply(self._core.manager, run.child_agent_id)
            result = reply[:MAX_RESULT_CHARS] or result
        try:
            head = self._core.manager.get(run.requester_agent_id)
        except errors.AgentNotFound:
            self._give_up(run, "the requester no longer exists")
            return Finished()
        delivering = run.delivering or Delivering(head.epoch, head.next_seq)
        ready = replace(
            run, announce_state=AnnounceState.PENDING, delivering=delivering, result_text=result
        )
        self._core.ledger.put(ready)
        text = notice_text(ready, note)
        notice = SubagentNotice(run.run_id, run.child_agent_id, text)
        wake = wake_prompt(text) if run.expects_completion_message else None
        return Deliver(ready, notice, wake, run.delivering)

    async def _announce_failed(self, run_id: str, why: str, permanent: bool) -> float | None:
        run = self._core.ledger.runs.get(run_id)
        if run is None or run.announce_state.finished:
            return None
        backoff = self._core.limits.retry_backoff_s
        if permanent or run.attempts >= len(backoff):
            self._give_up(run, why)
            return None
        self._core.ledger.put(replace(run, attempts=run.attempts + 1))
        return backoff[run.attempts]

    def _give_up(self, run: SubagentRun, why: str) -> None:
        log.warning("sub-agent run %s: announce given up: %s", run.run_id, why)
        self._finish(run, AnnounceState.GIVEN_UP)

    async def _finish_announce(self, run_id: str, state: AnnounceState) -> None:
        run = self._core.ledger.runs.get(run_id)
        # Delivered is the truth even if a kill suppressed the announce meanwhile.
        if run is not None and (
            state is AnnounceState.DELIVERED or not run.announce_state.finished
        ):
            self._finish(run, state)

    def _finish(self, run: SubagentRun, state: AnnounceState) -> None:
        self._core.ledger.put(
            replace(run, announce_state=state, announced_at_ms=self._core.clock.now_ms())
        )
