"""`corral serve` and its web port as a process: on by default (port 0 next to a port-0
--listen), its URL printed in the start-up line, `off`, the token rule for other
addresses, and a standby that binds the web port when it takes over."""

from __future__ import annotations

import re
import signal
import socket
from pathlib import Path

import httpx2 as httpx

from corral.v1 import agent_service_pb2 as agent_pb
from tests.support.daemon import DaemonProcess

WEB = re.compile(r", web (http://127\.0\.0\.1:(\d+)/)[,;]")


def _dashboard(line: str) -> str:
    """The web port's URL in a start-up line."""
    match = WEB.search(line)
    assert match is not None, line
    return match.group(1)


def _list_agents(url: str) -> agent_pb.ListAgentsResponse:
    answer = httpx.post(
        url + "corral.v1.AgentService/ListAgents",
        content=b"",
        headers={"content-type": "application/proto"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return agent_pb.ListAgentsResponse.FromString(answer.content)


def test_serve_opens_the_web_port_by_default_and_prints_its_url(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "state").start()
    try:
        url = _dashboard(daemon.first_line)
        assert _list_agents(url) == agent_pb.ListAgentsResponse()
        assert httpx.get(url, timeout=30).status_code == 200
    finally:
        daemon.stop()


def test_web_listen_off_opens_no_web_port(tmp_path: Path) -> None:
    daemon = DaemonProcess(
        tmp_path / "state", "--web-listen", "off", "--drain-delay-s", "0"
    ).start()
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    code, out, _ = daemon.wait()
    assert code == 0 and out == "" and " web " not in daemon.first_line, daemon.first_line


def test_a_web_port_off_loopback_needs_a_token_file(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "state", "--web-listen", "0.0.0.0:0").start(
        expect_ready=False
    )
    code, out, err = daemon.wait()
    assert code == 2 and "--web-listen 0.0.0.0:0" in err and "--auth-token-file" in err
    assert "listening" not in out


def test_a_standby_binds_its_web_port_when_it_takes_over(tmp_path: Path) -> None:
    state = tmp_path / "state"
    serving = DaemonProcess(state, "--drain-delay-s", "0").start()
    standby = DaemonProcess(state, "--standby").start(expect_ready=False)
    try:
        _dashboard(serving.first_line)
        assert standby.proc is not None and standby.proc.stdout is not None
        assert "standby" in standby.proc.stdout.readline()
        assert serving.proc is not None
        serving.proc.send_signal(signal.SIGTERM)
        assert serving.wait(30)[0] == 0
        line = standby.proc.stdout.readline()  # blocks until the takeover
        assert " listening on " in line, line
        assert _list_agents(_dashboard(line)) == agent_pb.ListAgentsResponse()
    finally:
        serving.stop()
        standby.stop()


def test_a_taken_web_port_stops_the_start_up_naming_it(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        daemon = DaemonProcess(tmp_path / "state", "--web-listen", f"127.0.0.1:{port}")
        code, out, err = daemon.start(expect_ready=False).wait()
    assert code == 2 and f"127.0.0.1:{port} (--web-listen)" in err
    assert "listening" not in out
