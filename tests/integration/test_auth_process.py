"""`corral serve` with tokens, as a process: SIGHUP reloads the token file without a restart (a
bad file keeps the old tokens), the reflection flag, and the start-up refusals (a non-loopback
address without a token file, an unreadable or empty token file): an exit code and a message,
never a traceback.

Non-loopback addresses appear only as arguments refused before anything binds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli.health import health_stub
from corral_server import daemon as serve_cli
from tests.support.client import Stubs, error_details
from tests.support.daemon import DaemonProcess

OLD, NEW = "old-token-0123456789", "new-token-9876543210"


def reason_for(address: str, token: str) -> str:
    """ "" when ListAgents with `token` succeeds, else the ErrorInfo reason of its refusal."""
    with grpc.insecure_channel(address) as channel:
        try:
            Stubs.of(channel).agents.ListAgents(
                agent_pb.ListAgentsRequest(),
                metadata=(("authorization", f"Bearer {token}"),),
                timeout=30,
            )
        except grpc.RpcError as exc:
            return error_details(exc).reason
    return ""


def hangup(proc: DaemonProcess, logged: str) -> str:
    """SIGHUP, then the first log line containing `logged` (the reload's outcome)."""
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGHUP)
    return proc.wait_for_log(logged)


def test_sighup_reloads_the_tokens_without_a_restart(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{OLD}\n")
    proc = DaemonProcess(tmp_path / "state", "--auth-token-file", str(tokens)).start()
    try:
        assert "tokens" in proc.first_line
        assert (reason_for(proc.address, OLD), reason_for(proc.address, NEW)) == (
            "",
            "TOKEN_INVALID",
        )
        tokens.write_text(f"# rotated\n{NEW}\n")
        hangup(proc, "reloaded 1 token(s)")
        assert (reason_for(proc.address, OLD), reason_for(proc.address, NEW)) == (
            "TOKEN_INVALID",
            "",
        )
        # Several tokens: both work after the next reload (an overlap while clients move over).
        tokens.write_text(f"{OLD}\n{NEW}\n")
        hangup(proc, "reloaded 2 token(s)")
        assert (reason_for(proc.address, OLD), reason_for(proc.address, NEW)) == ("", "")
    finally:
        proc.stop()


def test_a_bad_reload_keeps_the_previous_tokens_and_says_why(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{OLD}\n")
    proc = DaemonProcess(tmp_path / "state", "--auth-token-file", str(tokens)).start()
    try:
        tokens.write_text("# nothing here yet\n\n")
        line = hangup(proc, "token reload failed")
        assert "holds no token" in line and "keeping the previous 1 token(s)" in line
        tokens.unlink()
        line = hangup(proc, "token reload failed")
        assert "cannot read the token file" in line
        assert reason_for(proc.address, OLD) == ""
        assert OLD not in line
    finally:
        proc.stop()


def test_health_needs_no_token_in_a_served_daemon(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{OLD}\n")
    proc = DaemonProcess(tmp_path / "state", "--auth-token-file", str(tokens)).start()
    try:
        with grpc.insecure_channel(proc.address) as channel:
            reply = health_stub(channel).Check(
                health_pb2.HealthCheckRequest(service="corral.v1.AgentService"), timeout=30
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.stop()


def grpcurl_list(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = Path(sys.executable).parent / "grpcurl"
    return subprocess.run(
        [str(path), "-plaintext", *args, address, "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(("flag", "served"), [((), True), (("--reflection", "off"), False)])
def test_reflection_follows_the_flag_and_is_on_by_default_on_loopback(
    tmp_path: Path, flag: tuple[str, ...], served: bool
) -> None:
    proc = DaemonProcess(tmp_path / "state", *flag).start()
    try:
        done = grpcurl_list(proc.address)
        assert (done.returncode == 0) is served, done.stderr
        if not served:
            assert "does not support the reflection API" in done.stderr
            assert "no reflection" in proc.first_line
    finally:
        proc.stop()


def test_reflection_auto_is_on_only_on_loopback() -> None:
    assert serve_cli.reflection_on("auto", "127.0.0.1:0")
    assert serve_cli.reflection_on("auto", "[::1]:50051")
    assert not serve_cli.reflection_on("auto", "0.0.0.0:50051")
    assert serve_cli.reflection_on("on", "0.0.0.0:50051")
    assert not serve_cli.reflection_on("off", "127.0.0.1:0")


def refused_start(tmp_path: Path, *args: str, listen: str = "127.0.0.1:0") -> tuple[int, str]:
    proc = DaemonProcess(tmp_path / "state", *args, listen=listen).start(expect_ready=False)
    code, out, err = proc.wait()
    assert "Traceback" not in err and "corral listening" not in out, err
    return code, err


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0", ":0", "192.0.2.1:50051"])
def test_a_non_loopback_listen_without_a_token_file_is_refused(tmp_path: Path, listen: str) -> None:
    code, err = refused_start(tmp_path, listen=listen)
    assert code == 2
    assert "not a loopback address" in err and "--auth-token-file" in err


def test_allow_remote_is_gone(tmp_path: Path) -> None:
    code, err = refused_start(tmp_path, "--allow-remote", listen="0.0.0.0:0")
    assert code == 2 and "unrecognized arguments: --allow-remote" in err


def test_an_empty_token_file_stops_the_start_up(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# only a comment\n\n   \n")
    code, err = refused_start(tmp_path, "--auth-token-file", str(tokens))
    assert code == 2 and f"cannot start: the token file {tokens} holds no token" in err


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_token_file_stops_the_start_up(tmp_path: Path, kind: str) -> None:
    tokens = tmp_path / "tokens"
    if kind == "directory":
        tokens.mkdir()
    code, err = refused_start(tmp_path, "--auth-token-file", str(tokens))
    assert code == 2 and f"cannot read the token file {tokens}" in err


def test_a_token_file_line_with_a_space_stops_the_start_up_without_echoing_it(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{OLD}\nsecret with spaces\n")
    code, err = refused_start(tmp_path, "--auth-token-file", str(tokens))
    assert code == 2 and "line 2" in err
    assert "secret" not in err and OLD not in err
