"""A standby's waiting listener, through a `corral serve --standby` subprocess: with
`--listen unix:PATH` its socket is 0600 from the bind (like the serving one), it is removed when
the standby stops, and the standby takes over on the same path; an address it cannot take (a
port in use, a socket another server answers on) is one line on stderr and exit 2, with no
traceback and no socket taken from the server there."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli.health import health_stub
from tests.support.client import Stubs
from tests.support.daemon import DaemonProcess

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """Short (a socket path holds at most 107 bytes) and private to us."""
    path = Path(tempfile.mkdtemp(prefix="corral-sb-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_stub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
    return int(reply.status)


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    (line,) = err.splitlines()
    return line


def test_a_standby_socket_is_0600_removed_at_its_stop_and_serves_after_the_takeover(
    socket_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    path = socket_dir / "standby.sock"
    serving = DaemonProcess(state, "--drain-delay-s", "0").start()
    standby = DaemonProcess(state, "--standby", listen=f"unix:{path}")
    standby.start(expect_ready=False)
    try:
        assert standby.proc is not None and standby.proc.stdout is not None
        assert standby.proc.stdout.readline().startswith(f"corral standby on unix:{path} ")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert health(f"unix:{path}") == NOT_SERVING
        assert serving.proc is not None
        serving.proc.send_signal(signal.SIGTERM)
        assert serving.wait()[0] == 0
        line = standby.proc.stdout.readline()  # blocks until it serves
        assert line.startswith(f"corral listening on unix:{path} "), line
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert health(f"unix:{path}") == SERVING
    finally:
        serving.stop()
        standby.stop()


def test_a_standby_stopped_while_waiting_removes_its_socket(
    socket_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    path = socket_dir / "standby.sock"
    serving = DaemonProcess(state).start()
    standby = DaemonProcess(state, "--standby", listen=f"unix:{path}")
    standby.start(expect_ready=False)
    try:
        assert standby.proc is not None and standby.proc.stdout is not None
        assert standby.proc.stdout.readline().startswith("corral standby on ")
        standby.proc.send_signal(signal.SIGTERM)
        assert standby.wait()[0] == 0
        assert not path.exists()
    finally:
        serving.stop()
        standby.stop()


def test_a_standby_on_a_port_in_use_is_one_line_and_exit_two(tmp_path: Path) -> None:
    state = tmp_path / "state"
    serving = DaemonProcess(state).start()
    try:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            address = f"127.0.0.1:{holder.getsockname()[1]}"
            standby = DaemonProcess(state, "--standby", listen=address)
            code, out, err = standby.start(expect_ready=False).wait()
        assert (code, out) == (2, "")
        assert f"cannot start: cannot listen on {address}" in one_error_line(err)
    finally:
        serving.stop()


def test_a_standby_on_a_socket_another_server_answers_is_refused_and_takes_nothing(
    socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "taken.sock"
    other = DaemonProcess(tmp_path / "other", listen=f"unix:{path}").start()
    state = tmp_path / "state"
    serving = DaemonProcess(state).start()
    try:
        standby = DaemonProcess(state, "--standby", listen=f"unix:{path}")
        code, out, err = standby.start(expect_ready=False).wait()
        assert (code, out) == (2, "")
        line = one_error_line(err)
        assert line.endswith(f"cannot start: cannot listen on unix:{path}: a server answers there")
        with grpc.insecure_channel(other.address) as channel:  # still the other's socket
            Stubs.of(channel).agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=30)
    finally:
        serving.stop()
        other.stop()
