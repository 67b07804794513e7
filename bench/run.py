"""Every benchmark in one run, printed as one report (what buildscripts/bench runs).

  P1   events/s to 1, 10, 100 subscribers: corral live and replay vs the bare servers
  P1'  rows/s through the single writer; P1'' durable against bare SQLite, same rows
  P2   a 200-row page at 1 k vs 1 M rows: in the store, and through FetchTimeline over gRPC
  P4   provider event to subscriber latency; P5 SendPrompt ack latency (100 agents);
       durable beside the disk's fsync latency
  P6   resident memory per idle agent
  P3   start-up with 10 k stored agents x 1 k rows until health is SERVING
  P7   fan-out cost: scripted turns/s with 100 subscribers against none
  P10  resident memory under hostile clients: never-reading streams, refused huge requests
  search  a query over 1 M rows (p50 / p99); P1' durable with the index against without it
  web  events/s through Connect streaming to 1 and 10 Node subscribers against gRPC Subscribe
  page the dashboard: gzip size; a 10,000-row agent page in headless Chromium
  cluster  three nodes on three NATS servers: one writer's and 30 writers' rows/s, event to
       another node's subscriber p50/p99, a subscriber's switch-over after a node SIGKILL

Run: .venv/bin/python -m bench.run [--quick]
"""

from __future__ import annotations

import asyncio
import sys

from bench import (
    anchor,
    cluster,
    dashboard,
    fanout,
    latency,
    memory,
    memory_hostile,
    p1,
    p2_pages,
    p2_projected,
    p2_rpc,
    search,
    startup,
    web_stream,
    writer,
)


async def main(quick: bool) -> None:
    history = 200_000 if quick else 1_000_000
    await p1.main(history)
    print()
    rows = 50_000 if quick else 200_000
    rate = await writer.measure(rows)
    subscribers = writer.SUBSCRIBERS
    print(
        f"P1' single writer, {subscribers} live subscribers: {rate:,.0f} rows/s (goal >= 100,000)"
    )
    print(await writer.durable_against_anchor(rows, rate))
    print()
    searched = await search.query_latency(history)
    print(search.report(searched, await search.writer_cost(rows)))
    print()
    store = await p2_pages.measure()
    print(p2_pages.report(store))
    print()
    print(p2_rpc.report(await p2_rpc.measure()))
    print()
    print(p2_projected.report(await p2_projected.measure(200_000 if quick else 1_000_000)))
    print()
    turns = 10 if quick else 20
    print(latency.report(await latency.measure(turns)))
    fsync = await asyncio.to_thread(anchor.fsync_ms)
    print(anchor.fsync_report(fsync))
    durable_latency = await latency.measure(turns, durable=True)
    print(latency.report(durable_latency, " (durable store)", fsync))
    print(memory.report(await memory.measure()))
    print(memory_hostile.report(await asyncio.to_thread(memory_hostile.measure)))
    await startup.main(*((1_000, 100) if quick else (10_000, 1_000)))
    print()
    print(fanout.report(*await fanout.measure(rounds=1 if quick else fanout.ROUNDS)))
    print()
    print(web_stream.report(await web_stream.measure(rounds=1 if quick else web_stream.ROUNDS)))
    print()
    loads = await asyncio.to_thread(dashboard.page_load_ms, 3 if quick else dashboard.LOADS)
    print(dashboard.report(dashboard.gzip_sizes(), loads))
    print()
    await cluster.report(quick)


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
