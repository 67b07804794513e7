"""How long the bench daemon's event loop stalled, and why: its own work, or waiting for a CPU.

A task wakes every 5 ms; a wake-up more than STALL_MS late is a stall. For each stall it reads
the loop thread's CPU time and (Linux, /proc/self/task/TID/schedstat) the time the thread sat
runnable in the kernel's run queue, waiting for a processor. A stall the thread spent running
is the daemon's (a long callback, a collection); one it spent in the run queue is the machine
being busy (other processes, or this one's other threads when the cores are full).
Collections are timed through `gc.callbacks`.

Used by bench/burst_daemon.py when CORRAL_BENCH_STALLS names a file: the summary is written
there as JSON when the daemon stops. Bench only: nothing in the daemon imports this.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

TICK_S = 0.005
STALL_MS = 5.0


def _run_queue_ns() -> int | None:
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


class Stalls:
    def __init__(self) -> None:
        self.stalls: list[tuple[float, float, float | None]] = []  # lag, cpu, run-queue ms
        self.collections: list[float] = []  # ms each
        self._gc_started = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.ensure_future(self._tick())

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections.append((time.perf_counter() - self._gc_started) * 1000)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started, cpu, queued = loop.time(), time.thread_time(), _run_queue_ns()
            await asyncio.sleep(TICK_S)
            lag = (loop.time() - started - TICK_S) * 1000
            if lag > STALL_MS:
                after = _run_queue_ns()
                waited = None if after is None or queued is None else (after - queued) / 1e6
                self.stalls.append((lag, (time.thread_time() - cpu) * 1000, waited))

    def write(self, path: Path) -> None:
        if self._task is not None:
            self._task.cancel()
        lags = sorted(s[0] for s in self.stalls)
        queued = [s[2] for s in self.stalls if s[2] is not None]
        summary = {
            "stalls": len(lags),
            "stalled_ms": sum(lags),
            "max_ms": lags[-1] if lags else 0.0,
            "running_ms": sum(s[1] for s in self.stalls),
            "run_queue_ms": sum(queued) if len(queued) == len(lags) else None,
            "collections": len(self.collections),
            "collection_max_ms": max(self.collections, default=0.0),
        }
        path.write_text(json.dumps(summary))


def report(summary: dict[str, Any]) -> str:
    queued = summary["run_queue_ms"]
    why = "" if queued is None else f", {queued:,.0f} ms of it waiting for a CPU"
    return (
        f"the daemon's loop: {summary['stalls']} stalls over {STALL_MS:.0f} ms, "
        f"{summary['stalled_ms']:,.0f} ms in all (longest {summary['max_ms']:.0f} ms){why}, "
        f"{summary['running_ms']:,.0f} ms running; {summary['collections']} collections, "
        f"longest {summary['collection_max_ms']:.1f} ms"
    )
