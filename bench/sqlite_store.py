"""The SQLite timeline store, next to the in-memory store of the same run.

  burst    one agent bursting single-row appends through the store alone (no actor, no hub):
           pipelined with append_nowait, as a single writer that keeps going while earlier rows
           commit would; and 100-row appends awaited one by one. Goal >= 80,000 rows/s.
  group    100 agents appending one row at a time, each awaiting its own append: rows/s,
           commits, rows per commit, append latency p50/p99 (the durable ack's cost).
  pages    a 200-row BEFORE page at 1 k and 1 M rows: warm (the same page again) and cold
           (after a reopen: random cursors, so SQLite's cache starts empty). Goal <= 1.5x.

The database lives in a temporary directory next to the checkout (the same disk as a state
directory), synchronous=FULL unless said otherwise.

Run: .venv/bin/python -m bench.sqlite_store [--quick]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import p2_pages
from corral_server.domain.timeline import AssistantMessage, Cursor, Direction
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.database import Database, Synchronous
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import NewRow, TimelineStore

ROW = NewRow(AssistantMessage("a streamed chunk of assistant text, about sixty bytes"), 0, "t1")
PAGE_ROWS = 200
# The producer yields to the loop after this many rows, as an actor does between provider
# events: commits settle meanwhile.
YIELD_EVERY = 64


def _scratch() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="bench-sqlite-", dir=Path(__file__).parent.parent)


async def _sqlite(directory: str, synchronous: Synchronous = "FULL") -> Any:
    database = await Database.open(Path(directory), synchronous=synchronous)
    return database, await SqliteTimelineStore.open(database, ITEM_CODEC)


# --- burst ----------------------------------------------------------------------------------


async def _pipelined(store: TimelineStore, rows: int) -> float:
    await store.create("burst")
    started = time.perf_counter()
    pending = []
    for i in range(rows):
        pending.append(store.append_nowait("burst", [ROW]))
        if i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    await asyncio.gather(*pending)
    return rows / (time.perf_counter() - started)


async def _batched(store: TimelineStore, rows: int, batch: int = 100) -> float:
    await store.create("batched")
    started = time.perf_counter()
    for _ in range(rows // batch):
        await store.append("batched", [ROW] * batch)
    return rows / (time.perf_counter() - started)


async def burst(rows: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "memory pipelined": await _pipelined(InMemoryTimelineStore(), rows),
        "memory 100-row appends": await _batched(InMemoryTimelineStore(), rows),
    }
    for synchronous in ("FULL", "NORMAL"):
        with _scratch() as directory:
            database, store = await _sqlite(directory, synchronous)
            commits = database.commits
            rate = await _pipelined(store, rows)
            out[f"sqlite {synchronous} pipelined"] = rate
            out[f"sqlite {synchronous} rows/commit"] = rows / max(1, database.commits - commits)
            out[f"sqlite {synchronous} 100-row appends"] = await _batched(store, rows)
            await database.close()
    return out


# --- group commit ---------------------------------------------------------------------------


async def group(agents: int, rows_each: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("memory", "sqlite FULL", "sqlite NORMAL"):
        with _scratch() as directory:
            database = None
            store: TimelineStore
            if name == "memory":
                store = InMemoryTimelineStore()
            else:
                database, store = await _sqlite(directory, name.split()[1])  # type: ignore[arg-type]
            out[name] = await _group(store, database, agents, rows_each)
            if database is not None:
                await database.close()
    return out


async def _group(
    store: TimelineStore, database: Database | None, agents: int, rows_each: int
) -> dict[str, float]:
    names = [f"agent-{i}" for i in range(agents)]
    for name in names:
        await store.create(name)
    latencies: list[float] = []

    async def agent(name: str) -> None:
        for _ in range(rows_each):
            began = time.perf_counter()
            await store.append(name, [ROW])
            latencies.append(time.perf_counter() - began)

    commits = database.commits if database else 0
    started = time.perf_counter()
    await asyncio.gather(*(agent(name) for name in names))
    elapsed = time.perf_counter() - started
    latencies.sort()
    total = agents * rows_each
    return {
        "rows/s": total / elapsed,
        "rows/commit": total / max(1, (database.commits - commits) if database else total),
        "p50 ms": 1000 * latencies[len(latencies) // 2],
        "p99 ms": 1000 * latencies[int(len(latencies) * 0.99)],
    }


# --- pages ----------------------------------------------------------------------------------


async def _fill(directory: str, size: int) -> None:
    database, store = await _sqlite(directory, "NORMAL")
    await store.create("bench")
    for start in range(0, size, 10_000):
        await store.append("bench", [ROW] * min(10_000, size - start))
    await database.close()


async def _page_us(store: SqliteTimelineStore, cursor: Cursor) -> float:
    began = time.perf_counter()
    page = await store.fetch("bench", Direction.BEFORE, cursor, PAGE_ROWS)
    assert len(page.rows) == PAGE_ROWS
    return (time.perf_counter() - began) * 1e6


async def _pages_at(directory: str, size: int, samples: int) -> dict[str, float]:
    picker = random.Random(2)
    cold: list[float] = []
    for _ in range(5):  # reopen: SQLite's page cache starts empty each time
        database, store = await _sqlite(directory)
        epoch = store.head("bench").epoch
        for _ in range(samples // 5):
            cursor = Cursor(epoch, picker.randint(PAGE_ROWS + 1, size))
            cold.append(await _page_us(store, cursor))
        await database.close()
    database, store = await _sqlite(directory)
    middle = Cursor(store.head("bench").epoch, size // 2)
    warm = [await _page_us(store, middle) for _ in range(samples)]
    tail = []
    for _ in range(samples):
        began = time.perf_counter()
        await store.fetch("bench", Direction.TAIL, None, PAGE_ROWS)
        tail.append((time.perf_counter() - began) * 1e6)
    await database.close()
    return {
        "cold_us": statistics.median(cold),
        "warm_us": statistics.median(warm[1:]),
        "tail_us": statistics.median(tail[1:]),
    }


async def pages(sizes: tuple[int, int], samples: int) -> dict[int | str, Any]:
    out: dict[int | str, Any] = {}  # by size, then the ratios and the memory
    for size in sizes:
        with _scratch() as directory:
            began = time.perf_counter()
            await _fill(directory, size)
            filled = time.perf_counter() - began
            out[size] = await _pages_at(directory, size, samples)
            out[size]["fill_rows/s"] = size / filled
    small, large = sizes
    out["ratios"] = {
        kind: out[large][kind] / out[small][kind] for kind in ("cold_us", "warm_us", "tail_us")
    }
    out["memory"] = await p2_pages.measure(sizes)
    return out


# --- report ---------------------------------------------------------------------------------


def report(burst_: dict[str, Any], group_: dict[str, Any], pages_: dict[int | str, Any]) -> str:
    lines = ["SQLite store: one agent bursting single rows (rows/s, store alone; goal >= 80,000)"]
    lines += [f"  {name:<30} {value:>12,.0f}" for name, value in burst_.items()]
    lines.append("SQLite store: 100 agents, each awaiting its own one-row appends")
    for name, figures in group_.items():
        cells = "  ".join(f"{key} {value:,.1f}" for key, value in figures.items())
        lines.append(f"  {name:<14} {cells}")
    lines.append(f"SQLite store: {PAGE_ROWS}-row BEFORE page (median us; goal <= 1.5x)")
    for size, figures in pages_.items():
        if isinstance(size, int):
            cells = "  ".join(f"{key} {value:,.1f}" for key, value in figures.items())
            lines.append(f"  {size:>10,} rows  {cells}")
    ratios = pages_["ratios"]
    lines.append("  ratio 1M/1k   " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    lines.append(p2_pages.report(pages_["memory"]))
    return "\n".join(lines)


async def main(quick: bool) -> None:
    burst_ = await burst(50_000 if quick else 200_000)
    group_ = await group(100, 20 if quick else 100)
    pages_ = await pages((1_000, 100_000 if quick else 1_000_000), 50 if quick else 200)
    print(report(burst_, group_, pages_))


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
