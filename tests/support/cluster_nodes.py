"""A whole corral cluster of real processes on loopback ports, for the end-to-end cluster tests:
three NATS servers (tests/support/nats.py), three `corral serve --cluster ...` subprocesses,
each waited for until its health answers SERVING, and Envoy in front of them running
deploy/cluster/envoy.yaml with only its addresses moved to loopback (routes, retries and health
checks as shipped, so the example is what is tested). A node or a NATS server can be killed
with SIGKILL and started again on its ports and state, as a crashed machine coming back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2

from corral_cli.health import health_stub
from tests.support.envoy import Envoy, admin_get, envoy_running
from tests.support.envoy import poll as envoy_poll
from tests.support.nats import NatsCluster, free_ports, poll, running_nats_cluster

ROOT = Path(__file__).resolve().parents[2]
ENVOY_CONFIG = ROOT / "deploy" / "cluster" / "envoy.yaml"
EXAMPLE_NODES = ("corral-1", "corral-2", "corral-3")  # the hosts the example names
TIMEOUT = 60.0  # generous: a 2-core machine running the suite in parallel starts slowly


def health_of(address: str) -> str | None:
    """The node's grpc.health.v1 status for "" (SERVING, NOT_SERVING), None: no answer."""
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_stub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError:
        return None
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


@dataclass
class CorralNode:
    """One `corral serve` node: its gRPC and web ports are fixed, so a restart comes back at
    the address it advertises and Envoy's endpoint names."""

    name: str
    port: int
    web_port: int
    state_dir: Path
    nats_urls: tuple[str, ...]
    log: Path
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "corral_server.daemon",
            "--listen",
            self.address,
            "--web-listen",
            f"127.0.0.1:{self.web_port}",
            "--state-dir",
            str(self.state_dir),
            "--cluster",
            ",".join(self.nats_urls),
            "--node-id",
            self.name,
            "--advertise",
            self.address,
            "--drain-delay-s",  # a test's stop need not wait for a balancer to notice
            "0",
            *self.extra,
        ]

    def spawn(self) -> None:
        """Start the process (its stdout and stderr into `log`); `serving` waits for it."""
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, env=env)

    def serving(self) -> None:
        def probe() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"node {self.name} exited: {self.log_tail()}")
            return "yes" if health_of(self.address) == "SERVING" else None

        poll(probe, f"node {self.name} SERVING", TIMEOUT)

    def kill(self) -> None:
        """SIGKILL: no drain, no lease given up, nothing flushed."""
        self.stop(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but runs nothing (a node far behind)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.spawn()
        self.serving()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=TIMEOUT)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Cluster:
    nats: NatsCluster
    nodes: list[CorralNode]
    envoy: Envoy
    tmp_path: Path
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def through_envoy(self) -> str:
        """Where clients connect: Envoy's gRPC listener."""
        return self.envoy.listening("corral_grpc")

    def node(self, name: str) -> CorralNode:
        return next(node for node in self.nodes if node.name == name)

    def kill_node(self, name: str) -> None:
        self.node(name).kill()

    def restart_node(self, name: str) -> None:
        self.node(name).restart()

    def kill_nats(self, name: str) -> None:
        self.nats.kill(name)

    def restart_nats(self, name: str) -> None:
        self.nats.restart(name)

    def stream_leader(self, stream: str = "CORRAL_EVENTS") -> str | None:
        """The NATS server leading `stream`, as the running servers report it."""
        for server in self.nats.servers:
            if server.proc is None or server.proc.poll() is not None:
                continue
            url = f"http://127.0.0.1:{server.monitor_port}/jsz?streams=true"
            for leader in _stream_leaders(url, stream):
                return leader
        return None

    def active_requests(self, name: str) -> int:
        """The calls Envoy has open on node `name` now (its streams included)."""
        prefix = f"corral::127.0.0.1:{self.node(name).port}::rq_active::"
        for line in admin_get(self.envoy.admin, "/clusters").splitlines():
            if line.startswith(prefix):
                return int(line[len(prefix) :])
        raise AssertionError(f"Envoy lists no node {name}")

    def until_in_rotation(self, name: str, flags: str = "healthy") -> None:
        """Until Envoy's health check shows node `name` as `flags` (or /failed_active_hc)."""
        port = self.node(name).port
        envoy_poll(
            lambda: flags if self.envoy.health_flags(port) == flags else None,
            f"{name} {flags}",
            TIMEOUT,
        )


def _stream_leaders(url: str, stream: str) -> list[str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            report: dict[str, Any] = json.loads(reply.read())
    except (urllib.error.URLError, OSError, ValueError):
        return []
    leaders = []
    for account in report.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            cluster = detail.get("cluster") or {}
            if detail.get("name") == stream and cluster.get("leader"):
                leaders.append(str(cluster["leader"]))
    return leaders


def envoy_on_loopback(grpc_ports: list[int], web_ports: list[int], text: str = "") -> str:
    """deploy/cluster/envoy.yaml (or `text`, a changed copy of it) with its admin and
    listeners on free loopback ports and its three nodes (the file's corral-1..3, in order) on
    the given ports; everything else as shipped."""
    config: dict[str, Any] = yaml.safe_load(text or ENVOY_CONFIG.read_text())
    config["admin"]["address"]["socket_address"]["port_value"] = 0
    for listener in config["static_resources"]["listeners"]:
        listener["address"]["socket_address"] = {"address": "127.0.0.1", "port_value": 0}
    for cluster in config["static_resources"]["clusters"]:
        (group,) = cluster["load_assignment"]["endpoints"]
        ports = grpc_ports if cluster["name"] == "corral" else web_ports
        for entry, host, port, grpc_port in zip(
            group["lb_endpoints"], EXAMPLE_NODES, ports, grpc_ports, strict=True
        ):
            endpoint = entry["endpoint"]
            address = endpoint["address"]["socket_address"]
            assert address["address"] == host, address
            address.update(address="127.0.0.1", port_value=port)
            if "health_check_config" in endpoint:  # the web port, checked on its gRPC port
                endpoint["health_check_config"] = {"port_value": grpc_port}
    return yaml.safe_dump(config)


def stop_all(nodes: list[CorralNode]) -> None:
    """SIGTERM to every node at once (each drains), then wait for each."""
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGTERM)
    for node in nodes:
        node.stop()


def make_nodes(
    tmp_path: Path, nats: NatsCluster, names: tuple[str, ...], extra: tuple[str, ...] = ()
) -> list[CorralNode]:
    ports = free_ports(2 * len(names))
    nodes = []
    for index, name in enumerate(names):
        state = tmp_path / name
        nodes.append(
            CorralNode(
                name=name,
                port=ports[2 * index],
                web_port=ports[2 * index + 1],
                state_dir=state,
                nats_urls=tuple(nats.urls),
                log=tmp_path / f"{name}.log",
                extra=extra,
            )
        )
    return nodes


@contextlib.contextmanager
def running_cluster(
    tmp_path: Path, names: tuple[str, ...] = ("c1", "c2", "c3"), extra: tuple[str, ...] = ()
) -> Iterator[Cluster]:
    """Three NATS servers, the nodes `names` (started together, each SERVING, with the flags
    `extra` too) and Envoy in front of them, every node in its rotation. Logs:
    tmp_path/nats/*.log, tmp_path/NAME.log, tmp_path/envoy/envoy.log."""
    assert len(names) == len(EXAMPLE_NODES), "the example has three nodes"
    for sub in ("nats", "envoy"):
        (tmp_path / sub).mkdir()
    with contextlib.ExitStack() as stack:
        nats = stack.enter_context(running_nats_cluster(tmp_path / "nats"))
        nodes = make_nodes(tmp_path, nats, names, extra)
        stack.callback(stop_all, nodes)
        for node in nodes:
            node.spawn()
        for node in nodes:
            node.serving()
        text = envoy_on_loopback([n.port for n in nodes], [n.web_port for n in nodes])
        envoy = stack.enter_context(envoy_running(tmp_path / "envoy", text))
        cluster = Cluster(nats, nodes, envoy, tmp_path)
        for name in names:
            cluster.until_in_rotation(name)
        yield cluster
