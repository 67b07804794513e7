"""Steer (docs/design.md#subagents): a running run is replaced by a new run of the same child with a
new message.

1. One job checks the run (not ended, not being steered), the rate limit (one steer per
   controller and child every `steer_interval_s`) and marks the run: its end is announced
   no more (RunEnding.steering).
2. The child's queue is cleared and its turn interrupted; a provider that refuses ends the
   steer (the run goes on, its announce restored).
3. One job after the interrupt settled (the settle's own job runs first: it was posted
   before the cancel returned) ends the old run if its settle did not (a child that was not
   running), and stores the new run (so a fast turn's settle finds it).
4. The message is sent to the child as a new turn. If that fails, one job forgets the new run
   and restores the old run's announce (it is delivered as if never steered).
5. One job notes on the old run which run replaced it and arms the new run's timeout.

Must not: change an agent except through the manager; import grpc or protobuf.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from corral_server import errors
from corral_server.domain.content import TextPart
from corral_server.domain.subagents import AnnounceState, Outcome, RunId, SubagentRun
from corral_server.manager.turns import CancelOutcome, IfRunning
from corral_server.subagents.announce import Announcer
from corral_server.subagents.children import clear_queue
from corral_server.subagents.core import RunCore
from corral_server.subagents.ending import RunEnding

# A steering message is at most this long.
MAX_STEER_CHARS = 4_000
# The end reason of a run replaced by a steer.
STEER_RESTART = "steer-restart"


def check_message(message: str) -> None:
    if not message.strip():
        raise errors.InvalidArgument.field("message", "required: the new instruction")
    if len(message) > MAX_STEER_CHARS:
        raise errors.InvalidArgument.field("message", f"at most {MAX_STEER_CHARS} chars")


class RunSteering:
    def __init__(
        self, core: RunCore, ending: RunEnding, announcer: Announcer, new_id: Callable[[], str]
    ) -> None:
        self._core = core
        self._ending = ending
        self._announcer = announcer
        self._interval_ms = round(core.limits.steer_interval_s * 1000)
        self._new_id = new_id
        # (controller, child) -> when it was last steered (the rate limit).
        self._last_ms: dict[tuple[str, str], int] = {}

    async def steer(self, run_id: str, message: str, controller: str = "") -> SubagentRun:
        """Replace the running run with a new run of its child on `message` (the steps in the
        module docstring); the new run. `controller`: who steers ("": the run's own)."""
        check_message(message)
        old = await self._core.ledger.call(lambda: self._begin(run_id, controller))
        child = old.child_agent_id
        try:
            await clear_queue(self._core.manager, child)
            outcome, _ = await self._core.manager.cancel(child)
            if outcome is CancelOutcome.REFUSED:
                raise errors.ProviderRefusedInterrupt(
                    f"agent {child!r}: the provider refused to stop the run's turn; "
                    "the steer was abandoned and the run goes on",
                    metadata={"agent_id": child, "run_id": run_id},
                )
            new = await self._core.ledger.call(lambda: self._replace(run_id, message))
            try:
                await self._core.manager.send_prompt(
                    child, (TextPart(message),), "", IfRunning.REJECT
                )
            except BaseException:
                await self._core.ledger.call(lambda: self._forget(new, run_id))
                raise
        except BaseException:
            self._core.ledger.post(lambda: self._restore(run_id))
            raise
        return await self._core.ledger.call(lambda: self._finish(run_id, new))

    async def _begin(self, run_id: str, controller: str) -> SubagentRun:
        run = self._core.ledger.get(run_id)
        if run.ended or not run.child_agent_id:
            raise errors.SubagentRunEnded(
                f"sub-agent run {run_id!r} has ended; spawn a new run instead",
                metadata={"run_id": run_id},
            )
        if run_id in self._ending.steering:
            raise errors.SubagentRunSteering(
                f"sub-agent run {run_id!r} is being steered already",
                metadata={"run_id": run_id},
            )
        key = (controller or run.controller_agent_id, run.child_agent_id)
        now = self._core.clock.now_ms()
        last = self._last_ms.get(key)
        if last is not None and now - last < self._interval_ms:
            wait_ms = self._interval_ms - (now - last)
            raise errors.SteerRateLimited(
                f"agent {run.child_agent_id!r} was steered {now - last} ms ago; "
                f"steer again in {wait_ms} ms",
                metadata={"run_id": run_id, "retry_after_ms": str(wait_ms)},
            )
        self._last_ms[key] = now
        self._ending.steering.add(run_id)
        return run

    async def _replace(self, run_id: str, message: str) -> SubagentRun:
        """The old run ended (by its settle, or now), then the new run stored."""
        old = self._core.ledger.runs[run_id]
        if run_id not in self._ending.steering:
            raise errors.SubagentRunEnded(
                f"sub-agent run {run_id!r} was killed while being steered",
                metadata={"run_id": run_id},
            )
        if not old.ended:  # its child was not running: nothing settled
            old = self._ending.end(old, Outcome.KILLED, STEER_RESTART, announce=False)
        now = self._core.clock.now_ms()
        new = SubagentRun(
            run_id=RunId(self._new_id()),
            child_agent_id=old.child_agent_id,
            requester_agent_id=old.requester_agent_id,
            controller_agent_id=old.controller_agent_id,
            task=message,
            created_at_ms=now,
            depth=old.depth,
            label=old.label,
            cleanup=old.cleanup,
            run_timeout_s=old.run_timeout_s,
            expects_completion_message=old.expects_completion_message,
            started_at_ms=now,
        )
        self._core.ledger.put(new)
        return new

    async def _forget(self, new: SubagentRun, old_run_id: str) -> None:
        """The new run never started: its child's newest run is the old one again."""
        self._core.ledger.forget(new.run_id)
        self._core.ledger.by_child[new.child_agent_id] = old_run_id

    async def _restore(self, run_id: str) -> None:
        """The steer failed: the old run's end is announced after all (unless a kill
        suppressed it meanwhile: then there is no mark)."""
        marked = run_id in self._ending.steering
        self._ending.steering.discard(run_id)
        old = self._core.ledger.runs.get(run_id)
        if old is None or not marked:
            return
        if old.ended and old.announce_state is AnnounceState.SUPPRESSED:
            self._core.ledger.put(
                replace(old, announce_state=AnnounceState.PENDING, announced_at_ms=None)
            )
            self._announcer.start(run_id)

    async def _finish(self, run_id: str, new: SubagentRun) -> SubagentRun:
        self._ending.steering.discard(run_id)
        old = self._core.ledger.runs[run_id]
        self._core.ledger.put(
            replace(old, end_reason=f"{STEER_RESTART}: replaced by run {new.run_id}")
        )
        current = self._core.ledger.runs.get(new.run_id, new)
        if not current.ended and current.run_timeout_s:
            self._ending.arm_timeout(current)
        return current
