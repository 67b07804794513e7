"""P1 replay from the durable store alone (BENCHMARKS.md#goals): events/s that Subscribe
replays from the SQLite event log to 1, 10 and 100 subscribers, against the bare pre-encoded
batched server of p1_baselines.py and replay from the in-memory ring, in the same run.

One daemon with a durable store writes a history first; its ring holds 1,000 events, so
every subscriber resuming from revision 0 catches up from the log (the store's reader
thread), as after a restart. A second daemon keeps the same history in its ring. Rounds
alternate baseline, store and ring at each subscriber count; the report gives each round's
ratios and their median (the machine is shared: ratios within a round, not absolute rates),
and each server's CPU per delivered event (from /proc: it moves less with the machine's load
than the rates do).

Run: .venv/bin/python -m bench.replay_store [history_events] [rounds]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time

from bench import p1, p1_baselines
from bench.fanout import cpu_s
from corral.v1 import event_service_pb2 as event_pb

SUBSCRIBERS = (1, 10, 100)


KINDS = ("batched", "store", "ring")

Rates = dict[tuple[str, int], list[tuple[float, float]]]
"""(kind, subscribers) -> every round's (events/s, server CPU microseconds per event)."""


def _per_subscriber(history: int, subscribers: int) -> int:
    return history if subscribers < 100 else history // 10


async def _timed(pid: int, events: int, read: asyncio.Future[float]) -> tuple[float, float]:
    before = cpu_s(pid)
    rate = await read
    return rate, (cpu_s(pid) - before) / events * 1e6


async def _batched(subscribers: int) -> tuple[float, float]:
    """p1_baselines.run_baseline("batched", ...), with its server's CPU."""
    events = p1_baselines.EVENTS_PER_SUBSCRIBER["batched"][subscribers]
    server = await asyncio.create_subprocess_exec(
        sys.executable, p1_baselines.__file__, "--serve", "batched", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(await server.stdout.readline())
        request = event_pb.SubscribeRequest()
        read = p1_baselines.count_events(f"127.0.0.1:{port}", subscribers, events, request)
        return await _timed(server.pid, events * subscribers, asyncio.ensure_future(read))
    finally:
        server.terminate()
        await server.wait()


async def _replay(corral: p1.Corral, subscribers: int, events: int) -> tuple[float, float]:
    read = asyncio.ensure_future(p1.corral_replay(corral, subscribers, events))
    return await _timed(corral.proc.pid, events * subscribers, read)


async def measure(history: int, rounds: int) -> Rates:
    """Every round's figures per (kind, subscribers)."""
    rates: Rates = {}
    with tempfile.TemporaryDirectory() as state_dir:
        store = await p1.Corral.start(retain_events=1_000, state_dir=state_dir)
        ring = await p1.Corral.start(retain_events=history + 10_000)
        try:
            for corral, name in ((store, "store"), (ring, "ring")):
                started = time.perf_counter()
                await corral.burst(history)
                took = time.perf_counter() - started
                print(f"  ({history:,} rows written to the {name} daemon in {took:.1f} s)")
            for _ in range(rounds):
                for n in SUBSCRIBERS:
                    per_sub = _per_subscriber(history, n)
                    found = {
                        "batched": await _batched(n),
                        "store": await _replay(store, n, per_sub),
                        "ring": await _replay(ring, n, per_sub),
                    }
                    for kind, figures in found.items():
                        rates.setdefault((kind, n), []).append(figures)
                    base = found["batched"][0]
                    cells = "  ".join(
                        f"{kind} {rate:>10,.0f} ({rate / base:.2f}x, {cpu:.2f} us)"
                        for kind, (rate, cpu) in found.items()
                    )
                    print(f"  {n:>4} subscribers: {cells}", flush=True)
        finally:
            await store.stop()
            await ring.stop()
    return rates


def report(rates: Rates) -> str:
    lines = [
        "replay / batched, median of rounds [each round] (goal >= 0.8x);"
        " server CPU per event, median"
    ]
    for n in SUBSCRIBERS:
        batched = rates[("batched", n)]
        cells = []
        for kind in ("store", "ring"):
            ratios = [r[0] / b[0] for r, b in zip(rates[(kind, n)], batched, strict=True)]
            each = " ".join(f"{r:.2f}" for r in ratios)
            cells.append(f"{kind} {statistics.median(ratios):.2f}x [{each}]")
        cpu = "  ".join(
            f"{kind} {statistics.median(c for _, c in rates[(kind, n)]):.2f}" for kind in KINDS
        )
        lines.append(f"  {n:>4} subscribers: " + "   ".join(cells) + f"   CPU us: {cpu}")
    return "\n".join(lines)


async def main(history: int, rounds: int) -> None:
    print(report(await measure(history, rounds)))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 1_000_000, args[1] if len(args) > 1 else 3))
