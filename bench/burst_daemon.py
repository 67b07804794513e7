"""A daemon for the benchmarks: the real `Daemon` plus the `burst` provider, on a free
loopback port (printed on the first line), in its own process like a deployed daemon. With
`--web` it serves the web port too, on another free port (printed on the second line).

With CORRAL_BENCH_STALLS=FILE it times its loop's stalls and writes them to FILE when it stops
(bench/loop_stalls.py).

Run: .venv/bin/python -m bench.burst_daemon [--web] [retain_events [state_dir]]
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from bench.burst import BurstProvider
from bench.loop_stalls import Stalls
from corral_server import gc_tuning, reclaim
from corral_server.app import Config, Daemon


async def main(retain_events: int, state_dir: Path | None = None, web: bool = False) -> None:
    config = Config(
        listen="127.0.0.1:0",
        state_dir=state_dir,
        retain_events=retain_events,
        # The replay bench resumes from revision 0: every event must stay retained, so the
        # byte bound (256 MiB by default) is lifted to what the history needs.
        retain_bytes=1 << 32,
        # And the durable event log keeps the whole history too (the store replay bench).
        log_retain_events=None,
        log_retain_bytes=None,
        extra_providers={"burst": BurstProvider()},
        web_listen="127.0.0.1:0" if web else None,
    )
    gc_tuning.tune()  # before start-up, as `corral serve` does
    daemon = Daemon(config)
    port = await daemon.start()
    gc_tuning.settle()  # as `corral serve` does, and its allocator setting
    reclaim.tune_allocator()
    stalls = Stalls() if os.environ.get("CORRAL_BENCH_STALLS") else None
    if stalls is not None:
        stalls.start()
    print(port, flush=True)
    if web:
        print(daemon.web_port, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    if stalls is not None:
        stalls.write(Path(os.environ["CORRAL_BENCH_STALLS"]))
    await daemon.drain(1.0)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--web"]
    retain = int(args[0]) if args else 1_100_000
    asyncio.run(main(retain, Path(args[1]) if len(args) > 1 else None, "--web" in sys.argv))
