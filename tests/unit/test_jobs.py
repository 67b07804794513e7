"""The serial job queue (jobs.py) that an agent's actor and the sub-agent ledger run on."""

from __future__ import annotations

import asyncio

import pytest

from corral_server import errors
from corral_server.jobs import JobQueue, done_with


class Owner:
    def __init__(self, held: bool = False) -> None:
        self.failures: list[tuple[Exception, bool]] = []
        self.jobs = JobQueue("test", refusal=errors.ShuttingDown, on_error=self.failed, held=held)

    async def failed(self, exc: Exception, awaited: bool) -> None:
        self.failures.append((exc, awaited))


async def test_jobs_run_one_at_a_time_in_the_order_they_were_queued() -> None:
    owner = Owner()
    order: list[str] = []
    gate, entered = asyncio.Event(), asyncio.Event()

    async def first() -> str:
        order.append("first starts")
        entered.set()
        await gate.wait()
        order.append("first ends")
        return "a"

    async def second() -> str:
        order.append("second")
        return "b"

    calls = asyncio.gather(owner.jobs.call(first), owner.jobs.call(second))
    await entered.wait()
    assert order == ["first starts"]  # the second waits behind the first's await
    gate.set()
    assert list(await calls) == ["a", "b"]
    assert order == ["first starts", "first ends", "second"]


async def test_an_idle_queue_holds_no_task_and_the_next_job_starts_one() -> None:
    owner = Owner()
    assert not owner.jobs.running
    assert await owner.jobs.call(lambda: done_with(1)) == 1
    assert not owner.jobs.running  # it ended as the queue ran empty
    assert await owner.jobs.call(lambda: done_with(2)) == 2


async def test_a_failing_job_fails_its_caller_and_tells_the_owner() -> None:
    owner = Owner()
    boom = RuntimeError("boom")

    async def fails() -> None:
        raise boom

    with pytest.raises(RuntimeError):
        await owner.jobs.call(fails)
    owner.jobs.post(fails)
    assert await owner.jobs.call(lambda: done_with("after")) == "after"
    assert owner.failures == [(boom, True), (boom, False)]


async def test_jobs_queued_after_the_stop_fail_their_callers_never_hang() -> None:
    owner = Owner()
    gate, entered = asyncio.Event(), asyncio.Event()

    async def blocks() -> str:
        entered.set()
        await gate.wait()
        return "ran"

    running = asyncio.ensure_future(owner.jobs.call(blocks))
    await entered.wait()
    owner.jobs.stop()
    with pytest.raises(errors.ShuttingDown):
        await owner.jobs.call(lambda: done_with(0))  # refused at once
    gate.set()
    assert await running == "ran"  # what was queued before the stop still runs
    await owner.jobs.stopped_running()


async def test_a_killed_job_and_those_behind_it_fail_with_the_refusal() -> None:
    owner = Owner()
    never, entered = asyncio.Event(), asyncio.Event()

    async def hangs() -> None:
        entered.set()
        await never.wait()

    hung = asyncio.ensure_future(owner.jobs.call(hangs))
    behind = asyncio.ensure_future(owner.jobs.call(lambda: done_with(1)))
    await entered.wait()
    owner.jobs.kill()
    await owner.jobs.stopped_running()
    for caller in (hung, behind):
        with pytest.raises(errors.ShuttingDown):
            await caller


async def test_a_held_queue_runs_nothing_until_started() -> None:
    owner = Owner(held=True)
    ran: list[int] = []

    async def note() -> None:
        ran.append(1)

    owner.jobs.post(note)
    await asyncio.sleep(0)
    assert ran == [] and not owner.jobs.running
    owner.jobs.start()
    await owner.jobs.call(lambda: done_with(None))
    assert ran == [1]


async def test_a_held_queue_stopped_before_it_started_fails_what_waits() -> None:
    owner = Owner(held=True)
    waiting = asyncio.ensure_future(owner.jobs.call(lambda: done_with(1)))
    await asyncio.sleep(0)
    owner.jobs.stop()
    with pytest.raises(errors.ShuttingDown):
        await waiting
