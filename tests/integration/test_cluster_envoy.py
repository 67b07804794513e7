"""deploy/cluster/envoy.yaml checked by the real Envoy: `envoy --mode validate` accepts it, its
read routes name real methods and cover every call a read-only token may make, and, run in
front of three nodes (a real daemon, a node whose health says SERVING but which refuses every
corral call with UNAVAILABLE, and one that never answers): the silent node is out of rotation,
a read refused by one node is tried again on another and succeeds, a changing call is never
tried twice, a node turning NOT_SERVING leaves rotation, and the web listener reaches the
daemon's own web port (the dashboard and Connect) by the same gRPC health."""

from __future__ import annotations

import contextlib
import importlib
import json
import socket
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from corral.v1 import agent_service_pb2
from corral_server.app import Config
from corral_server.rpc.roles import READ_METHODS
from tests.support.client import Stubs, create_request
from tests.support.cluster_nodes import envoy_on_loopback
from tests.support.daemon import DaemonThread
from tests.support.envoy import TIMEOUT, Envoy, envoy_running, poll, validate

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "cluster" / "envoy.yaml"
HEALTH = "/grpc.health.v1.Health/"
# Reads a read-only token may not make (they wait, or read what only full tokens see), which
# are still the same on any node and safe to try twice.
MORE_READS = {"/corral.v1.TurnService/WaitForIdle"}  # reads only a full token may call


def all_methods() -> set[str]:
    """Every corral.v1 method, from the generated module of each service's file."""
    files = sorted((ROOT / "proto" / "corral" / "v1").glob("*_service.proto"))
    modules = [importlib.import_module(f"corral.v1.{file.stem}_pb2") for file in files]
    assert len(modules) >= 8
    return {
        f"/{service.full_name}/{method.name}"
        for module in modules
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


def routes(config: dict[str, Any], listener: str) -> list[dict[str, Any]]:
    (found,) = [
        entry for entry in config["static_resources"]["listeners"] if entry["name"] == listener
    ]
    (chain,) = found["filter_chains"]
    (manager,) = chain["filters"]
    (host,) = manager["typed_config"]["route_config"]["virtual_hosts"]
    return list(host["routes"])


def retried_on_unavailable(route: dict[str, Any]) -> bool:
    return "unavailable" in route["route"].get("retry_policy", {}).get("retry_on", "").split(",")


def test_envoy_accepts_the_cluster_config() -> None:
    done = validate(CONFIG)
    assert done.returncode == 0, done.stderr
    assert f"configuration '{CONFIG}' OK" in done.stdout


def test_reads_are_retried_and_nothing_else_is() -> None:
    """A misspelt path would send a read to the route that never retries it; a changing call
    on a read route could be stored twice."""
    grpc_routes = routes(yaml.safe_load(CONFIG.read_text()), "corral_grpc")
    methods = all_methods()
    retried: set[str] = set()
    for route in grpc_routes:
        match = route["match"]
        if not retried_on_unavailable(route):
            continue
        if "path" in match:
            assert match["path"] in methods, match
            retried.add(match["path"])
        else:
            assert match["prefix"] in ("/corral.v1.TimelineService/", HEALTH), match
            retried |= {m for m in methods if m.startswith(match["prefix"])}
    assert retried >= READ_METHODS
    assert retried - READ_METHODS == MORE_READS
    last = grpc_routes[-1]
    assert last["match"] == {"prefix": "/"} and not retried_on_unavailable(last)
    for route in grpc_routes:
        # No route may end a stream: not Subscribe, not StreamTurn, not an export.
        assert route["route"]["timeout"] == "0s"


class RefusingNode(grpc.GenericRpcHandler):
    """A node whose health answers SERVING while every corral call is refused with UNAVAILABLE
    (one that just lost the JetStream cluster, before its health says so); counts the calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def service(
        self, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        method = details.method
        if not method.startswith("/corral.v1."):
            return None

        def refuse(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self.lock:
                self.calls[method] += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "not connected to the JetStream cluster")

        return grpc.unary_unary_rpc_method_handler(refuse)

    def count(self, method: str) -> int:
        with self.lock:
            return self.calls[f"/corral.v1.{method}"]


@contextlib.contextmanager
def refusing_node() -> Iterator[tuple[int, RefusingNode, health.HealthServicer]]:
    node = RefusingNode()
    health_servicer = health.HealthServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[node])
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, node, health_servicer
    finally:
        server.stop(grace=None)


def until(envoy: Envoy, port: int, flags: str, cluster: str = "corral") -> None:
    poll(
        lambda: flags if envoy.health_flags(port, cluster) == flags else None,
        f"{cluster} {port} {flags}",
    )


def until_true(check: Callable[[], bool], what: str) -> None:
    poll(lambda: "yes" if check() else None, what)


@pytest.fixture
def daemon() -> Iterator[DaemonThread]:
    served = DaemonThread(Config(web_listen="127.0.0.1:0")).start()
    yield served
    served.stop()


def test_three_nodes_behind_the_cluster_envoy(daemon: DaemonThread, tmp_path: Path) -> None:
    assert daemon.daemon is not None and daemon.daemon.web_port is not None
    with contextlib.ExitStack() as stack:
        gone = stack.enter_context(socket.socket())  # bound, never listening: a dead node
        gone.bind(("127.0.0.1", 0))
        gone_port = gone.getsockname()[1]
        refusing_port, refusing, refusing_health = stack.enter_context(refusing_node())
        grpc_ports = [daemon.port, refusing_port, gone_port]
        web_ports = [daemon.daemon.web_port, gone_port, gone_port]
        text = envoy_on_loopback(grpc_ports, web_ports)
        envoy = stack.enter_context(envoy_running(tmp_path, text))
        until(envoy, daemon.port, "healthy")
        until(envoy, refusing_port, "healthy")
        until(envoy, gone_port, "/failed_active_hc")
        channel = stack.enter_context(grpc.insecure_channel(envoy.listening("corral_grpc")))
        stubs = Stubs.of(channel)

        # Reads: every one answered, also those that reached the refusing node first.
        def read_once() -> bool:
            listed = stubs.agents.ListAgents(agent_service_pb2.ListAgentsRequest(), timeout=TIMEOUT)
            assert list(listed.agents) == []
            return refusing.count("AgentService/ListAgents") > 0

        until_true(read_once, "a read that reached the refusing node")

        # A changing call reaching the refusing node fails there, and is not tried again.
        failed = created = 0

        def create_once() -> bool:
            nonlocal failed, created
            try:
                stubs.agents.CreateAgent(create_request(str(tmp_path)), timeout=TIMEOUT)
                created += 1
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                failed += 1
            return failed > 0

        until_true(create_once, "a create that reached the refusing node")
        assert refusing.count("AgentService/CreateAgent") == failed == 1

        # NOT_SERVING: out of rotation; every call goes to the daemon.
        refusing_health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        until(envoy, refusing_port, "/failed_active_hc")
        refused = refusing.count("AgentService/CreateAgent")
        for _ in range(4):
            stubs.agents.CreateAgent(create_request(str(tmp_path)), timeout=TIMEOUT)
        assert refusing.count("AgentService/CreateAgent") == refused

        # The web listener: the daemon's own web port, in rotation by its gRPC health; the
        # other two nodes are not (one NOT_SERVING, one gone).
        until(envoy, daemon.daemon.web_port, "healthy", "corral_web")
        until(envoy, gone_port, "/failed_active_hc", "corral_web")
        web = "http://" + envoy.listening("corral_web")
        with urllib.request.urlopen(web + "/", timeout=TIMEOUT) as page:
            assert page.status == 200 and "text/html" in page.headers["content-type"]
        ask = urllib.request.Request(
            web + "/corral.v1.AgentService/ListAgents",
            data=b"{}",
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(ask, timeout=TIMEOUT) as answer:
            assert len(json.loads(answer.read())["agents"]) == created + 4
