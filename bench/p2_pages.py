"""P2 (BENCHMARKS.md#goals): a 200-row timeline page costs the same at 1 M rows as at 1 k rows.

Measures InMemoryTimelineStore.fetch directly (no gRPC): the median time of a 200-row BEFORE page
from a cursor in the middle of the timeline, and of a 200-row TAIL page, at each size. Goal:
largest / smallest <= 1.5x for both.

For information only (not part of the goal), "before(cold)" pages from random cursors, so at 1 M
rows most pages touch rows that are not in the CPU cache: that ratio shows the memory hierarchy,
not the algorithm (the index arithmetic is the same), and runs about 1.3-1.7x on a 2-core VM.

Run: .venv/bin/python bench/p2_pages.py   (about 5-10 s; most of it is filling 1 M rows)
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from corral_server.domain.timeline import AssistantMessage, Cursor, Direction
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import NewRow

AGENT = "bench"
PAGE_ROWS = 200
GOAL_RATIO = 1.5
FILL_BATCH = 10_000
# Each sample times CALLS_PER_SAMPLE pages so one sample is ~1 ms, well above timer noise;
# the median of SAMPLES samples shrugs off the odd scheduler hiccup.
CALLS_PER_SAMPLE = 200
SAMPLES = 41


async def _filled(size: int) -> InMemoryTimelineStore:
    store = InMemoryTimelineStore()
    await store.create(AGENT)
    batch = [NewRow(AssistantMessage("a row of assistant text"), timestamp_ms=0)] * FILL_BATCH
    for start in range(0, size, FILL_BATCH):
        await store.append(AGENT, batch[: min(FILL_BATCH, size - start)])
    assert store.head(AGENT).next_seq == size + 1
    return store


def _page_calls(store: InMemoryTimelineStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    head = store.head(AGENT)
    middle = Cursor(head.epoch, head.next_seq // 2)
    picker = random.Random(2)  # the same cursors on every run
    scattered = [
        Cursor(head.epoch, picker.randint(PAGE_ROWS + 1, head.next_seq)) for _ in range(4096)
    ]
    cold_cursors = itertools.cycle(scattered)

    async def before() -> None:
        result = await store.fetch(AGENT, Direction.BEFORE, middle, PAGE_ROWS)
        assert len(result.rows) == PAGE_ROWS

    async def tail() -> None:
        result = await store.fetch(AGENT, Direction.TAIL, None, PAGE_ROWS)
        assert len(result.rows) == PAGE_ROWS

    async def before_cold() -> None:
        result = await store.fetch(AGENT, Direction.BEFORE, next(cold_cursors), PAGE_ROWS)
        assert len(result.rows) == PAGE_ROWS

    return {"before": before, "tail": tail, "before_cold": before_cold}


async def _sample_us(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter_ns()
    for _ in range(CALLS_PER_SAMPLE):
        await call()
    return (time.perf_counter_ns() - started) / CALLS_PER_SAMPLE / 1000


async def measure(sizes: Sequence[int] = (1000, 1_000_000)) -> dict[str, Any]:
    """Median microseconds per 200-row page at each size, and largest/smallest ratios.

    Samples for all sizes are interleaved so drift (CPU frequency, other load) hits every size
    alike. The collector is paused while timing: a full collection over 1 M rows is a cost of
    holding 1 M Python objects, not of paging, and would land on the big store by chance."""
    stores = {size: await _filled(size) for size in sizes}
    calls = {size: _page_calls(store) for size, store in stores.items()}
    samples: dict[int, dict[str, list[float]]] = {
        size: {kind: [] for kind in calls[size]} for size in sizes
    }
    gc.collect()
    gc.disable()
    try:
        for _ in range(SAMPLES + 1):  # the first round warms up and is discarded below
            for size in sizes:
                for kind, call in calls[size].items():
                    samples[size][kind].append(await _sample_us(call))
    finally:
        gc.enable()
    medians = {
        size: {f"{kind}_us": statistics.median(values[1:]) for kind, values in by_kind.items()}
        for size, by_kind in samples.items()
    }
    small, large = min(sizes), max(sizes)
    ratios = {
        kind: medians[large][f"{kind}_us"] / medians[small][f"{kind}_us"]
        for kind in ("before", "tail", "before_cold")
    }
    return {
        "page_rows": PAGE_ROWS,
        "medians": medians,
        "ratios": ratios,
        "goal_ratio": GOAL_RATIO,
        "ok": ratios["before"] <= GOAL_RATIO and ratios["tail"] <= GOAL_RATIO,
    }


def report(result: dict[str, Any]) -> str:
    lines = [f"P2: {result['page_rows']}-row page, in-memory store (median us per page)"]
    kinds = ("before", "tail", "before_cold")
    lines.append(f"{'rows':>12} {'before(mid)':>12} {'tail':>12} {'before(cold)':>12}")
    for size, medians in result["medians"].items():
        cells = " ".join(f"{medians[f'{kind}_us']:>12.2f}" for kind in kinds)
        lines.append(f"{size:>12,} {cells}")
    ratios = result["ratios"]
    cells = " ".join(f"{ratios[kind]:>11.2f}x" for kind in kinds)
    verdict = "ok" if result["ok"] else "MISSED"
    lines.append(f"{'ratio':>12} {cells}")
    lines.append(f"goal: before(mid) and tail <= {result['goal_ratio']}x: {verdict}")
    return "\n".join(lines)


def main() -> None:
    print(report(asyncio.run(measure())))


if __name__ == "__main__":
    main()
