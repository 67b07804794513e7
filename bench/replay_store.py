"""P1 replay from the durable store alone (BENCHMARKS.md#goals): events/s that Subscribe
replays from the SQLite event log to 1, 10 and 100 subscribers, against the bare pre-encoded
batched server of p1_baselines.py and replay from the in-memory ring, in the same run.

One daemon with a durable store writes a history first; its ring holds 1,000 events, so
every subscriber resuming from revision 0 catches up from the log (the store's reader
thread), as after a restart. A second daemon keeps the same history in its ring. Rounds
alternate baseline, store and ring at each subscriber count; the report gives each round's
ratios and their median (the machine is shared: ratios within a round, not absolute rates).

Run: .venv/bin/python -m bench.replay_store [history_events] [rounds]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time

from bench import p1, p1_baselines

SUBSCRIBERS = (1, 10, 100)


def _per_subscriber(history: int, subscribers: int) -> int:
    return history if subscribers < 100 else history // 10


async def measure(history: int, rounds: int) -> dict[tuple[str, int], list[float]]:
    """Every round's events/s per (kind, subscribers), kinds batched / store / ring."""
    rates: dict[tuple[str, int], list[float]] = {}
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
                    batched_events = p1_baselines.EVENTS_PER_SUBSCRIBER["batched"][n]
                    found = {
                        "batched": await p1_baselines.run_baseline("batched", batched_events, n),
                        "store": await p1.corral_replay(store, n, per_sub),
                        "ring": await p1.corral_replay(ring, n, per_sub),
                    }
                    for kind, rate in found.items():
                        rates.setdefault((kind, n), []).append(rate)
                    base = found["batched"]
                    cells = "  ".join(
                        f"{kind} {found[kind]:>12,.0f} ({found[kind] / base:.2f}x)"
                        for kind in ("store", "ring")
                    )
                    print(f"  {n:>4} subscribers: batched {base:>12,.0f}  {cells}", flush=True)
        finally:
            await store.stop()
            await ring.stop()
    return rates


def report(rates: dict[tuple[str, int], list[float]]) -> str:
    lines = ["replay / batched, median of rounds [each round]  (goal >= 0.8x)"]
    for n in SUBSCRIBERS:
        batched = rates[("batched", n)]
        cells = []
        for kind in ("store", "ring"):
            ratios = [r / b for r, b in zip(rates[(kind, n)], batched, strict=True)]
            each = " ".join(f"{r:.2f}" for r in ratios)
            cells.append(f"{kind} {statistics.median(ratios):.2f}x [{each}]")
        lines.append(f"  {n:>4} subscribers: " + "   ".join(cells))
    return "\n".join(lines)


async def main(history: int, rounds: int) -> None:
    print(report(await measure(history, rounds)))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 1_000_000, args[1] if len(args) > 1 else 3))
