"""P1 (BENCHMARKS.md#goals): events/s that corral's Subscribe delivers to 1, 10 and 100 subscribers,
next to the two bare grpc.aio servers of p1_baselines.py, in the same run.

  corral live    subscribers are synced, then one agent bursts N rows; each subscriber reads
                 until the turn's terminal event (rows plus a few lifecycle events)
  corral replay  an agent has written a long history first; subscribers resume from
                 revision 0 and read it all back from the retained ring
  store replay   the same from the durable event log (SQLite), the ring holding 1,000 events

Live delivery is bounded by the single writer (bench/writer.py measures it alone): for one
subscriber it cannot beat the single writer's own rows/s.

Run: .venv/bin/python -m bench.p1 [history_events]   (about 1-2 minutes on 2 cores)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from typing import Any

import grpc

from bench import p1_baselines
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc

SUBSCRIBERS = (1, 10, 100)
LIVE_ROWS = {1: 100_000, 10: 40_000, 100: 4_000}
_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


class Corral:
    """The bench daemon in a child process, and one bursting agent on it."""

    def __init__(self, proc: asyncio.subprocess.Process, address: str) -> None:
        self.proc, self.address = proc, address
        self.channel = grpc.aio.insecure_channel(address, options=_OPTIONS)
        self.agent_id = ""

    @classmethod
    async def start(cls, retain_events: int, state_dir: str = "") -> Corral:
        """`state_dir`: the daemon keeps its agents and timelines there (durable), else in
        memory."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.burst_daemon",
            str(retain_events),
            *([state_dir] if state_dir else []),
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        port = int(await proc.stdout.readline())
        corral = cls(proc, f"127.0.0.1:{port}")
        cwd = tempfile.mkdtemp(prefix="corral-bench-")
        reply = await agent_grpc.AgentServiceStub(corral.channel).CreateAgent(
            agent_pb.CreateAgentRequest(provider="burst", cwd=cwd)
        )
        corral.agent_id = reply.agent.id
        return corral

    async def burst(self, rows: int) -> None:
        """One turn of `rows` rows, to its end. SendPrompt + a scoped subscription, not
        StreamTurn: StreamTurn sends one message per row, which would bench that instead."""
        watch = event_grpc.EventServiceStub(self.channel).Subscribe(
            event_pb.SubscribeRequest(agent_ids=[self.agent_id])
        )
        try:
            await _synced(watch)
            request = turn_pb.SendPromptRequest(
                agent_id=self.agent_id, content=[content_pb.ContentPart(text=f"rows {rows}")]
            )
            await turn_grpc.TurnServiceStub(self.channel).SendPrompt(request)
            await _read_turn(watch)
        finally:
            watch.cancel()

    async def stop(self) -> None:
        await self.channel.close()
        self.proc.terminate()
        await self.proc.wait()


async def _synced(call: Any) -> None:
    async for response in call:
        if any(e.HasField("synced") for e in response.events):
            return
    raise RuntimeError("stream ended before synced")


async def _read_turn(call: Any) -> int:
    """Events up to and including the turn's terminal event."""
    received = 0
    async for response in call:
        received += len(response.events)
        if any(e.HasField("turn_completed") for e in response.events):
            return received
    raise RuntimeError("stream ended before turn_completed")


async def corral_live(corral: Corral, subscribers: int, rows: int) -> float:
    channels = [
        grpc.aio.insecure_channel(corral.address, options=_OPTIONS) for _ in range(subscribers)
    ]
    request = event_pb.SubscribeRequest(agent_ids=[corral.agent_id])
    calls = [event_grpc.EventServiceStub(c).Subscribe(request) for c in channels]
    try:
        await asyncio.gather(*(_synced(call) for call in calls))
        started = time.perf_counter()
        readers = [asyncio.ensure_future(_read_turn(call)) for call in calls]
        await corral.burst(rows)
        counts = await asyncio.gather(*readers)
        elapsed = time.perf_counter() - started
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*(c.close() for c in channels))
    return sum(counts) / elapsed


async def corral_replay(corral: Corral, subscribers: int, history: int) -> float:
    request = event_pb.SubscribeRequest(agent_ids=[corral.agent_id], resume_revision=0)
    return await p1_baselines.count_events(corral.address, subscribers, history, request)


async def main(history: int) -> None:
    rows: list[tuple[str, int, float]] = []

    def show(kind: str, subscribers: int, rate: float) -> None:
        rows.append((kind, subscribers, rate))
        print(f"  {kind:<14} {subscribers:>4} subscribers {rate:>14,.0f} events/s", flush=True)

    print("P1 delivered events/s (total over all subscribers)")
    for kind in p1_baselines.KINDS:
        for n in SUBSCRIBERS:
            show(
                kind,
                n,
                await p1_baselines.run_baseline(
                    kind, p1_baselines.EVENTS_PER_SUBSCRIBER[kind][n], n
                ),
            )
    corral = await Corral.start(retain_events=history + 500_000)
    try:
        for n in SUBSCRIBERS:
            show("corral live", n, await corral_live(corral, n, LIVE_ROWS[n]))
        started = time.perf_counter()
        await corral.burst(history)
        print(f"  (history of {history:,} rows written in {time.perf_counter() - started:.1f} s)")
        for n in SUBSCRIBERS:
            per_sub = history if n < 100 else history // 10
            show("corral replay", n, await corral_replay(corral, n, per_sub))
    finally:
        await corral.stop()
    # The same replay from the durable event log: a 1,000-event ring, so every subscriber
    # catches up from SQLite (the reader thread), as after a restart.
    with tempfile.TemporaryDirectory() as state_dir:
        corral = await Corral.start(retain_events=1_000, state_dir=state_dir)
        try:
            started = time.perf_counter()
            await corral.burst(history)
            took = time.perf_counter() - started
            print(f"  (the same history written to the durable store in {took:.1f} s)")
            for n in SUBSCRIBERS:
                per_sub = history if n < 100 else history // 10
                show("store replay", n, await corral_replay(corral, n, per_sub))
        finally:
            await corral.stop()
    rate = {(k, n): r for k, n, r in rows}
    print(
        "\n  subscribers  live/per-msg  live/batched  replay/per-msg  replay/batched  store/batched"
    )
    for n in SUBSCRIBERS:
        pm, b = rate[("per-message", n)], rate[("batched", n)]
        live, replay = rate[("corral live", n)], rate[("corral replay", n)]
        store = rate[("store replay", n)]
        ratios = (
            f"{live / pm:>12.1f}x {live / b:>12.2f}x {replay / pm:>14.1f}x {replay / b:>14.2f}x"
            f" {store / b:>14.2f}x"
        )
        print(f"  {n:>11} {ratios}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
