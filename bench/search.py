"""Full-text search (store/search.py): query latency over a large index, and what indexing
costs the single writer, in the same run.

  query  100 agents' timelines, N rows in all (1 M in the full run), each an assistant row of
         about a dozen words drawn from a 20,000-word vocabulary with Zipf frequencies (as
         words are in text). p50 / p99 of one first page (20 hits, ranked by bm25, snippets)
         read through SearchIndex in the reader thread, for words of each frequency band
         (rare: in ~0.01% of rows, medium: ~0.1%, common: ~1%), a two-word phrase, a prefix
         and an AND NOT. Goal: p99 under 50 ms.
  P1'    bench/writer.py's durable burst (rows through the single writer into SQLite and out
         to 10 subscribers) with the index (`--search-index`), and without it (the default),
         alternated, best of each. Goal: with >= 0.85x without; until it is met the index is
         opt-in.

Run: .venv/bin/python -m bench.search [--quick] [query | writer]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench import writer
from corral_server.domain.timeline import AssistantMessage
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.database import Database
from corral_server.store.search import Backfill, SearchIndex, SearchQuery
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import NewRow

AGENTS = 100
VOCABULARY = 20_000
WORDS_PER_ROW = 12
BATCH = 1_000
QUERIES_PER_KIND = 100


def _words() -> tuple[list[str], list[float]]:
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = sorted({"".join(rng.choices(letters, k=rng.randint(4, 9))) for _ in range(30_000)})
    rng.shuffle(vocabulary)
    vocabulary = vocabulary[:VOCABULARY]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    return vocabulary, weights


def _cumulative(weights: list[float]) -> list[float]:
    """For random.choices: given once, not recomputed per row (20,000 weights)."""
    total, out = 0.0, []
    for weight in weights:
        total += weight
        out.append(total)
    return out


async def _fill(
    store: SqliteTimelineStore, rows: int, words: list[str], weights: list[float]
) -> None:
    rng = random.Random(11)
    cumulative = _cumulative(weights)
    per_agent = rows // AGENTS
    for a in range(AGENTS):
        await store.create(f"agent-{a}")
    for start in range(0, per_agent, BATCH):
        for a in range(AGENTS):
            batch = [
                NewRow(
                    AssistantMessage(
                        " ".join(rng.choices(words, cum_weights=cumulative, k=WORDS_PER_ROW))
                    ),
                    start + i,
                )
                for i in range(min(BATCH, per_agent - start))
            ]
            await store.append(f"agent-{a}", batch)


def _queries(words: list[str], weights: list[float], rows: int) -> dict[str, list[str]]:
    """Words by the share of rows holding them (a word's expected rows from its weight)."""
    total = sum(weights)
    share = [min(1.0, WORDS_PER_ROW * w / total) for w in weights]
    bands = {"rare word (~0.01%)": 0.0001, "medium word (~0.1%)": 0.001, "common word (~1%)": 0.01}
    rng = random.Random(3)
    out: dict[str, list[str]] = {}
    for name, target in bands.items():
        near = sorted(range(len(words)), key=lambda i: abs(share[i] - target))[:QUERIES_PER_KIND]
        out[name] = [words[i] for i in near]
    medium = out["medium word (~0.1%)"]
    out["two-word phrase"] = [
        f'"{rng.choice(words[:200])} {rng.choice(words[:200])}"' for _ in medium
    ]
    out["prefix (3 letters*)"] = [f"{w[:3]}*" for w in medium]
    out["a AND NOT b"] = [f"{w} NOT {rng.choice(words[:50])}" for w in medium]
    return out


async def _time_queries(index: SearchIndex, queries: list[str]) -> tuple[float, float, int]:
    took: list[float] = []
    hits = 0
    for text in queries:
        started = time.perf_counter()
        found, _ = await index.search(SearchQuery(text, None, None, None, None, 0, 20))
        took.append(time.perf_counter() - started)
        hits += len(found)
    took.sort()
    return statistics.median(took) * 1000, took[int(len(took) * 0.99) - 1] * 1000, hits


async def query_latency(rows: int) -> dict[str, Any]:
    words, weights = _words()
    scratch = Path(__file__).parent.parent / ".bench"  # the checkout's disk, gitignored
    scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="search-", dir=scratch) as d:
        database = await Database.open(Path(d), synchronous="NORMAL")
        store = await SqliteTimelineStore.open(database, ITEM_CODEC, search_index=True)
        started = time.perf_counter()
        await _fill(store, rows, words, weights)
        filled = time.perf_counter() - started
        index = SearchIndex(database, Backfill(database, ITEM_CODEC.decode))
        out: dict[str, Any] = {"rows": rows, "fill s": filled}
        for name, queries in _queries(words, weights, rows).items():
            out[name] = await _time_queries(index, queries)
        await database.close()
    return out


class WriterCost(NamedTuple):
    """Rows/s with the index and without (the best of the rounds each), each round's ratio,
    and the process's CPU seconds per round with and without (load inflates CPU time far
    less than wall time: on a shared machine the CPU ratio is the steadier figure)."""

    indexed: float
    bare: float
    rounds: list[float]
    cpu_indexed: list[float]
    cpu_bare: list[float]


async def writer_cost(rows: int, rounds: int = 3) -> WriterCost:
    """The index on and off, alternated, `rounds` times each."""
    cost = WriterCost(0.0, 0.0, [], [], [])
    with_index: list[float] = []
    without: list[float] = []
    for _ in range(rounds):
        for on, rates, cpu in (
            (True, with_index, cost.cpu_indexed),
            (False, without, cost.cpu_bare),
        ):
            started = time.process_time()
            rates.append(await writer.measure(rows, durable=True, search_index=on))
            cpu.append(time.process_time() - started)
    rounds_ratio = [a / b for a, b in zip(with_index, without, strict=True)]
    return cost._replace(indexed=max(with_index), bare=max(without), rounds=rounds_ratio)


def report(latency: dict[str, Any], cost: WriterCost) -> str:
    lines = (
        []
        if not latency
        else [
            f"search over {latency['rows']:,} rows ({AGENTS} agents;"
            f" filled in {latency['fill s']:.0f} s), first page of 20 hits, p50 / p99"
            " (goal p99 < 50 ms):"
        ]
    )
    for name, value in latency.items():
        if isinstance(value, tuple):
            p50, p99, hits = value
            per_query = hits / QUERIES_PER_KIND
            lines.append(f"  {name:<22} {p50:7.1f} ms {p99:7.1f} ms   ({per_query:.0f} hits/query)")
    if not cost.bare:
        return "\n".join(lines)
    cpu = statistics.median(cost.cpu_bare) / statistics.median(cost.cpu_indexed)
    lines.append(
        f"P1' durable with the search index: {cost.indexed:,.0f} rows/s, without:"
        f" {cost.bare:,.0f} rows/s, {cost.indexed / cost.bare:.2f}x (goal >= 0.85x); each round: "
        + ", ".join(f"{r:.2f}x" for r in cost.rounds)
        + f"; CPU per row without / with (medians): {cpu:.2f}x"
    )
    return "\n".join(lines)


async def main(quick: bool, what: str) -> None:
    """`what`: "query" or "writer" for one half only, else both."""
    latency = await query_latency(100_000 if quick else 1_000_000) if what != "writer" else {}
    skipped = WriterCost(0.0, 0.0, [], [], [])
    cost = await writer_cost(50_000 if quick else 200_000) if what != "query" else skipped
    print(report(latency, cost))


if __name__ == "__main__":
    only = next((a for a in sys.argv[1:] if a in ("query", "writer")), "")
    asyncio.run(main("--quick" in sys.argv, only))
