"""The announce outbox (docs/design.md#subagents): an ended run's result reaches its requester as
one SubagentNotice row, exactly once, also across retries and restarts.

Each run with an announce due has one task here (never two: `start` is idempotent). The task
asks the registry for the next step (a job on the registry's queue, which owns every state
change) and does the slow part itself, off that queue:

1. WAIT: the child still has pending descendant runs, or is running (woken by one of their
   notices): deferred, re-checked every `defer_recheck_s` on the clock or at once when any run
   settles or is announced (a kick), for at most `defer_limit_s`; past it the notice goes
   anyway and says so.
2. DELIVER: the registry stored `Delivering(epoch, from_seq)` first (the requester's timeline
   before the notice). If an earlier attempt had stored one, the requester's rows from there on
   are searched for a notice of this run first (the run id is the idempotency key): found, it
   is delivered already. Otherwise `manager.add_notice` writes the row (and, with
   expects_completion_message, the turn carrying it) in one step of the requester's queue.
3. A requester that is gone or closed gives up at once; any other failure retries after 1, 2,
   4, 8 s, then gives up, and the requester is told (best effort) that a result was lost.

Must not: change a run record itself (the registry does), or import grpc or protobuf.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from corral_server import errors
from corral_server.clock import Clock
from corral_server.domain.content import Prompt, TextPart
from corral_server.domain.subagents import Delivering, SubagentRun
from corral_server.domain.timeline import Cursor, Direction, SubagentNotice
from corral_server.manager.deadlines import first_of

if TYPE_CHECKING:
    from corral_server.manager.manager import AgentManager

log = logging.getLogger(__name__)

# Pages read when looking for an earlier attempt's notice (each up to 200 rows): the notice is
# among the first rows after `from_seq` unless the requester was very busy meanwhile.
_SEARCH_PAGES = 50


@dataclass(frozen=True, slots=True)
class Wait:
    pass


@dataclass(frozen=True, slots=True)
class Deliver:
    run: SubagentRun
    notice: SubagentNotice
    wake: Prompt | None
    # Set when an earlier attempt may have written the notice already.
    recheck: Delivering | None


@dataclass(frozen=True, slots=True)
class Finished:
    pass


Step: TypeAlias = Wait | Deliver | Finished


class Outbox(Protocol):
    """What the announcer needs of the registry: each call is one job on its queue."""

    async def announce_step(self, run_id: str) -> Step: ...

    async def announce_delivered(self, run_id: str) -> None: ...

    async def announce_failed(self, run_id: str, why: str, permanent: bool) -> float | None:
        """Count a failed attempt: the back-off before the next, or None: given up."""
        ...


def notice_text(run: SubagentRun, note: str = "") -> str:
    """What the requester reads. No line starts with "/" (a scripted requester woken with it
    must not read a directive): the result is indented."""
    outcome = run.outcome.value.upper() if run.outcome is not None else "UNKNOWN"
    name = run.label or (run.task.splitlines() or [run.run_id])[0][:80]
    started = run.started_at_ms or run.created_at_ms
    runtime_s = max(0, (run.ended_at_ms or started) - started) / 1000
    lines = [
        f"Sub-agent {name!r} (run {run.run_id}, agent {run.child_agent_id}) ended: {outcome}",
        f"end reason: {run.end_reason}",
        f"runtime: {runtime_s:.1f} s",
    ]
    if run.usage is not None:
        lines.append(f"tokens: {run.usage.input_tokens} in, {run.usage.output_tokens} out")
    lines.append("task:")
    lines.extend(f"  {line}" for line in run.task.splitlines())
    if note:
        lines.append(f"note: {note}")
    lines.append("result:")
    lines.extend(f"  {line}" for line in (run.result_text or "(none)").splitlines())
    return "\n".join(lines)


def wake_prompt(text: str) -> Prompt:
    return (TextPart(text),)


async def find_notice(manager: AgentManager, agent_id: str, since: Delivering, run_id: str) -> bool:
    """Whether the agent's timeline holds a notice of `run_id` at or after `since`."""
    cursor: Cursor | None = Cursor(since.epoch, max(0, since.from_seq - 1))
    for _ in range(_SEARCH_PAGES):
        page = await manager.reads.fetch_timeline(agent_id, Direction.AFTER, cursor, None)
        if any(
            isinstance(row.item, SubagentNotice) and row.item.run_id == run_id for row in page.rows
        ):
            return True
        if page.reset or not page.has_newer or not page.rows:
            return False
        cursor = page.end_cursor
    return False


class Announcer:
    def __init__(
        self,
        outbox: Outbox,
        manager: AgentManager,
        clock: Clock,
        *,
        recheck_s: float,
    ) -> None:
        self._outbox = outbox
        self._manager = manager
        self._clock = clock
        self._recheck_s = recheck_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._kicked = asyncio.Event()
        self._stopped = False

    def start(self, run_id: str) -> None:
        """Announce the run (once: a task already on it keeps it)."""
        if self._stopped:
            return
        task = self._tasks.get(run_id)
        if task is None or task.done():
            self._tasks[run_id] = asyncio.create_task(
                self._announce(run_id), name=f"subagent-announce:{run_id}"
            )

    def kick(self) -> None:
        """Something settled: deferred announces look again now."""
        self._kicked.set()
        self._kicked = asyncio.Event()

    @property
    def busy(self) -> int:
        return sum(1 for task in self._tasks.values() if not task.done())

    async def stop(self) -> None:
        self._stopped = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _announce(self, run_id: str) -> None:
        try:
            while True:
                step = await self._outbox.announce_step(run_id)
                match step:
                    case Finished():
                        return
                    case Wait():
                        await first_of(self._clock.sleep(self._recheck_s), self._kicked.wait())
                    case Deliver():
                        if await self._deliver(step):
                            return
        except asyncio.CancelledError:
            raise
        except errors.ShuttingDown:
            return  # the registry stopped; the stored state resumes at the next start
        except Exception:
            log.exception("sub-agent run %s: its announce failed", run_id)
        finally:
            if self._tasks.get(run_id) is asyncio.current_task():
                del self._tasks[run_id]

    async def _deliver(self, step: Deliver) -> bool:
        """One attempt; True when the announce is finished (delivered or given up)."""
        run = step.run
        requester = run.requester_agent_id
        try:
            if step.recheck is not None and await find_notice(
                self._manager, requester, step.recheck, run.run_id
            ):
                log.info("sub-agent run %s: its notice was delivered before", run.run_id)
            else:
                await self._manager.add_notice(
                    requester, step.notice, step.wake, f"subagent-{run.run_id}"
                )
        except (errors.AgentNotFound, errors.AgentClosed) as exc:
            await self._outbox.announce_failed(run.run_id, exc.message, True)
            self.kick()
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            why = exc.message if isinstance(exc, errors.CorralError) else repr(exc)
            log.warning("sub-agent run %s: announce failed: %s", run.run_id, why)
            delay = await self._outbox.announce_failed(run.run_id, why, False)
            if delay is None:
                await self._tell_lost(run)
                self.kick()
                return True
            await self._clock.sleep(delay)
            return False
        await self._outbox.announce_delivered(run.run_id)
        self.kick()
        return True

    async def _tell_lost(self, run: SubagentRun) -> None:
        """Given up after retries: the requester is told rather than left waiting."""
        text = (
            f"Sub-agent run {run.run_id} (agent {run.child_agent_id}) ended, but its result "
            "could not be delivered; see ListSubagentRuns for its record"
        )
        notice = SubagentNotice(run.run_id, run.child_agent_id, text)
        try:
            await self._manager.add_notice(run.requester_agent_id, notice)
        except Exception:
            log.warning("sub-agent run %s: the requester could not be told", run.run_id)
