"""The measured steps of the peer bench (bench/peer.py), the same for both servers: a streamed
turn watched by N clients, a watcher that drops and resumes, history pages."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bench import peer_procs
from bench.peer_api import HistoryPager
from tests.support.fake_models import FakeModelServer, script
from tests.support.fake_models.server import Exchange

READY_S = 60.0
TURN_S = 180.0
HISTORY_FETCHES = 10
_nonces = itertools.count(1)


class Watcher(Protocol):
    ready: asyncio.Event
    done_s: float
    bytes_in: int

    @property
    def chunks(self) -> Sequence[object]: ...

    @property
    def view(self) -> Any: ...

    def run(self, drop_after: int = 0, resume: bool = False) -> Coroutine[Any, Any, None]: ...


class Side(Protocol):
    name: str

    @property
    def server(self) -> Any: ...

    @property
    def pid(self) -> int: ...

    def agent_pids(self) -> list[int]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def new_session(self) -> str: ...

    async def prompt(self, session: str, text: str) -> None: ...

    async def turn(self, session: str, text: str) -> None: ...

    def watcher(self, session: str) -> Watcher: ...

    def history(self, session: str) -> HistoryPager: ...


@dataclass(frozen=True, slots=True)
class Turn:
    watchers: int
    deltas: int
    first_byte_ms: float  # the model's first byte -> the last watcher's complete reply
    last_byte_ms: float  # the model's last byte -> the same
    last_chunk_ms: float  # the model's last byte -> the last watcher's last chunk of text
    server_cpu_ns: int
    agent_cpu_ns: int  # corral's agent process (the ACP hop); 0 for opencode
    bytes_per_watcher: float
    chunks_per_watcher: float
    incomplete: int  # watchers whose reply text was not the model's


@dataclass(frozen=True, slots=True)
class Drop:
    expected: int  # chunks the reply had
    missing: int
    duplicated: int
    text_whole: bool  # the chunks received, joined, are the reply


def reply_prompt(deltas: int) -> tuple[str, str, int]:
    """A prompt whose reply streams `deltas` deltas 0.1 s apart: (the prompt, the reply's
    text, its number of deltas)."""
    nonce = f"n{next(_nonces)}"
    slow_s = deltas * script.SLOW_TICK_S + script.SLOW_TICK_S / 2
    chunks = script.chunks(nonce, slow_s)
    return f"[[reply: {nonce}]][[slow: {slow_s}]]", "".join(chunks), len(chunks)


def reply_exchange(fake: FakeModelServer, prompt: str) -> Exchange:
    calls = [e for e in fake.model_calls() if e.answer == "text" and prompt in e.prompt]
    if not calls:
        raise RuntimeError(f"the fake model never answered {prompt!r}")
    return calls[-1]


def cpu_now(pids: Sequence[int]) -> dict[int, peer_procs.CpuReading]:
    return {pid: peer_procs.cpu_reading(pid) for pid in pids}


def cpu_between(
    before: dict[int, peer_procs.CpuReading], after: dict[int, peer_procs.CpuReading]
) -> int:
    return sum(peer_procs.cpu_used_ns(before[p], after[p]) for p in after if p in before)


async def all_ready(watchers: Sequence[Watcher], tasks: Sequence[asyncio.Task[None]]) -> None:
    """Until every watcher is connected; a watcher that fails to connect raises here."""
    ready: asyncio.Future[Any] = asyncio.ensure_future(
        asyncio.gather(*(w.ready.wait() for w in watchers))
    )
    waited: set[asyncio.Future[Any]] = {ready, *tasks}
    try:
        done, _ = await asyncio.wait(waited, timeout=READY_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
    for task in tasks:
        if task in done:
            task.result()
    if not all(w.ready.is_set() for w in watchers):
        raise TimeoutError("watchers not connected in time")


async def streamed_turn(
    side: Side, fake: FakeModelServer, session: str, count: int, deltas: int
) -> Turn:
    prompt, reply, sent = reply_prompt(deltas)
    watchers = [side.watcher(session) for _ in range(count)]
    tasks = [asyncio.create_task(w.run()) for w in watchers]
    try:
        await all_ready(watchers, tasks)
        agents = side.agent_pids()
        server_before, agent_before = cpu_now([side.pid]), cpu_now(agents)
        await side.prompt(session, prompt)
        await asyncio.wait_for(asyncio.gather(*tasks), TURN_S)
        server_after, agent_after = cpu_now([side.pid]), cpu_now(agents)
    finally:
        for task in tasks:
            task.cancel()
    exchange = reply_exchange(fake, prompt)
    last_s = max(w.done_s for w in watchers)
    return Turn(
        watchers=count,
        deltas=sent,
        first_byte_ms=(last_s - exchange.started_s) * 1000,
        last_byte_ms=(last_s - exchange.ended_s) * 1000,
        last_chunk_ms=(max(w.view.last_chunk_s for w in watchers) - exchange.ended_s) * 1000,
        server_cpu_ns=cpu_between(server_before, server_after),
        agent_cpu_ns=cpu_between(agent_before, agent_after),
        bytes_per_watcher=statistics.fmean(w.bytes_in for w in watchers),
        chunks_per_watcher=statistics.fmean(len(w.chunks) for w in watchers),
        incomplete=sum(1 for w in watchers if w.view.text != reply),
    )


async def drop_and_resume(side: Side, fake: FakeModelServer, session: str, deltas: int) -> Drop:
    """A watcher leaves after a third of the reply's chunks and comes back a third later."""
    prompt, reply, sent = reply_prompt(deltas)
    watcher = side.watcher(session)
    first = asyncio.create_task(watcher.run(drop_after=max(1, deltas // 3)))
    await all_ready([watcher], [first])
    await side.prompt(session, prompt)
    await asyncio.wait_for(first, TURN_S)
    await asyncio.sleep(deltas / 3 * script.SLOW_TICK_S)
    await asyncio.wait_for(watcher.run(resume=True), TURN_S)
    expected = await expected_chunks(side, session, watcher, sent)
    received = list(watcher.chunks)
    unique = len(set(received))
    return Drop(expected, expected - unique, len(received) - unique, watcher.view.text == reply)


async def expected_chunks(side: Side, session: str, watcher: Watcher, deltas: int) -> int:
    """How many chunks the reply was delivered as: opencode sends one event per model delta;
    corral one row per coalesced stretch, as stored (the timeline's rows of the turn)."""
    counter = getattr(side, "reply_rows", None)
    if counter is None:
        return deltas
    rows: int = await counter(session, watcher)
    return rows


async def history(side: Side, session: str) -> dict[str, tuple[float, float, int, int]]:
    """Per page (whole, last 100 turns, last 10): (first ms, median ms, bytes, server CPU us
    per fetch)."""
    return await asyncio.to_thread(_history, side, session)


def _history(side: Side, session: str) -> dict[str, tuple[float, float, int, int]]:
    pager = side.history(session)
    pages: dict[str, tuple[float, float, int, int]] = {}
    try:
        total = pager.turns()
        for label, turns in (("whole", None), ("last 100 turns", 100), ("last 10 turns", 10)):
            turns = None if turns is None else min(turns, total)
            times: list[float] = []
            before = cpu_now([side.pid])
            for _ in range(HISTORY_FETCHES):
                started = time.perf_counter()
                size = pager.fetch(turns)
                times.append((time.perf_counter() - started) * 1000)
            cpu_us = cpu_between(before, cpu_now([side.pid])) // 1000 // HISTORY_FETCHES
            pages[label] = (times[0], statistics.median(times), size, cpu_us)
        pages["turns"] = (0.0, 0.0, total, 0)
    finally:
        pager.close()
    return pages
