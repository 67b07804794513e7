"""A cluster node for the benchmarks: the real `Daemon` as a node of a corral cluster
(docs/cluster.md) plus the `burst` provider, on the given loopback port, in its own process
like a deployed node. Prints its port once it serves.

Run: .venv/bin/python -m bench.cluster_node PORT STATE_DIR NODE_ID NATS_URLS
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from bench.burst import BurstProvider
from corral_server import gc_tuning, reclaim
from corral_server.app import Config, Daemon
from corral_server.cluster.settings import ClusterConfig, parse_urls


async def main(port: int, state_dir: Path, node_id: str, urls: str) -> None:
    address = f"127.0.0.1:{port}"
    config = Config(
        listen=address,
        state_dir=state_dir,
        extra_providers={"burst": BurstProvider()},
        cluster=ClusterConfig(urls=parse_urls(urls), node_id=node_id, advertise=address),
    )
    daemon = Daemon(config)
    print(await daemon.start(), flush=True)
    gc_tuning.settle()  # as `corral serve` does, and its allocator setting
    reclaim.tune_allocator()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await daemon.drain(1.0, delay_s=0.0)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
