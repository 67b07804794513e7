"""`corral serve --listen unix:PATH`, through the wire: the socket is 0600 from the moment it
is bound, local like loopback (no token asked), reached by the Python client and the CLI
(--addr and CORRAL_ADDR), refused to another user (uid 65534), removed at the drain, with no
web port opened on loopback beside it; a
directory others could write into, or a path another daemon already serves, stops the start.

Sockets live in short directories under /tmp (a Unix socket path holds at most 107 bytes).
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli.main import main
from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonProcess

NOBODY = 65534
CONNECT = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A directory others may enter but not write, as a home directory often is."""
    path = Path(tempfile.mkdtemp(prefix="corral-sock-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def serve_on(socket_path: Path, state: Path, *extra: str) -> DaemonProcess:
    return DaemonProcess(state, *extra, listen=f"unix:{socket_path}")


def test_a_unix_socket_is_0600_and_serves_the_python_client_and_the_cli(
    socket_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = socket_dir / "corral.sock"
    proc = serve_on(path, tmp_path / "state", "--drain-delay-s", "0").start()
    try:
        assert proc.address == f"unix:{path}"
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with grpc.insecure_channel(proc.address) as channel:  # no token: local, like loopback
            created = Stubs.of(channel).agents.CreateAgent(
                create_request(str(tmp_path)), timeout=30
            )
        assert main(["--addr", proc.address, "ls"]) == 0
        assert created.agent.id[:8] in capsys.readouterr().out
        monkeypatch.setenv("CORRAL_ADDR", proc.address)
        assert main(["close", created.agent.id]) == 0
        with grpc.insecure_channel(proc.address) as channel:
            closed = Stubs.of(channel).agents.GetAgent(
                agent_pb.GetAgentRequest(agent_id=created.agent.id), timeout=30
            )
        assert closed.agent.lifecycle.WhichOneof("state") == "closed"
        # setpriv changes the user, not subprocess's user=/group=: those make Python fork
        # (not vfork) from a process running grpc's threads, and the child can crash in
        # grpc's fork handlers before it runs anything.
        other = subprocess.run(
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                "/usr/bin/python3",
                "-I",
                "-c",
                CONNECT,
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
        )
        assert other.returncode != 0 and "PermissionError" in other.stderr
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGTERM)
        code, out, err = proc.wait()
        assert code == 0, err
        assert "dashboard" not in out  # no web port unless asked for: nothing on loopback
        assert not path.exists()  # the drain removes its socket
    finally:
        proc.stop()


def test_a_socket_directory_others_can_write_into_is_refused(
    socket_dir: Path, tmp_path: Path
) -> None:
    socket_dir.chmod(0o777)  # without the sticky bit: anyone may replace the socket
    proc = serve_on(socket_dir / "corral.sock", tmp_path / "state").start(expect_ready=False)
    code, _, err = proc.wait()
    assert code == 2 and "writable by other users" in err and "Traceback" not in err
    assert not (socket_dir / "corral.sock").exists()


def test_a_socket_another_daemon_serves_is_not_taken_over(socket_dir: Path, tmp_path: Path) -> None:
    path = socket_dir / "corral.sock"
    first = serve_on(path, tmp_path / "one").start()
    try:
        second = serve_on(path, tmp_path / "two").start(expect_ready=False)
        code, _, err = second.wait()
        assert code == 2 and "a server answers there" in err
        with grpc.insecure_channel(first.address) as channel:  # the first still serves
            Stubs.of(channel).agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=30)
    finally:
        first.stop()
