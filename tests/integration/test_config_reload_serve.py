"""`corral serve --config FILE` reloads the file on SIGHUP and when it changes
(docs/design.md#live-config), as a process: a bad file is refused with one line naming file,
table and key while agents keep working; a changed mode default reaches a live agent without
a signal (the daemon's poll); a changed process signature restarts an idle agent's process,
and the metrics count the reloads and the restart."""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from tests.support.client import Stubs, SyncStubs, create_request
from tests.support.daemon import DaemonProcess

DEMO = '[providers.demo]\nkind = "scripted"\n'


def write(path: Path, content: str) -> None:
    fresh = path.with_suffix(".new")
    fresh.write_text(content)
    os.replace(fresh, path)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[DaemonProcess, Path]]:
    path = tmp_path / "corral.toml"
    write(path, DEMO)
    state = tmp_path / "state"
    daemon = DaemonProcess(state)
    daemon.args = [sys.executable, "-m", "corral_cli.main", "serve", "--listen", "127.0.0.1:0"]
    daemon.args += ["--state-dir", str(state), "--drain-delay-s", "0", "--config", str(path)]
    daemon.args += ["--web-listen", "off", "--metrics-listen", "127.0.0.1:0"]
    daemon.start()
    try:
        yield daemon, path
    finally:
        daemon.drained()


def until(check: object, what: str, timeout_s: float = 20.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling the daemon, not timing it


def metrics_url(daemon: DaemonProcess) -> str:
    # The start-up line names the metrics address.
    for word in daemon.first_line.replace(",", " ").replace(";", " ").split():
        if word.startswith("http://") and word.endswith("/metrics"):
            return word
    raise AssertionError(f"no metrics url in {daemon.first_line!r}")


def metric(url: str, line_start: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = answer.read().decode()
    for line in body.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_sighup_and_a_changed_file_reload_the_providers(
    served: tuple[DaemonProcess, Path], tmp_path: Path
) -> None:
    daemon, path = served
    assert daemon.proc is not None
    with grpc.insecure_channel(daemon.address) as channel:
        stubs: SyncStubs = Stubs.of(channel)
        made = stubs.agents.CreateAgent(create_request(str(tmp_path), provider="demo"), timeout=30)
        agent_id = made.agent.id

        def agent() -> svc_pb.GetAgentResponse:
            request = svc_pb.GetAgentRequest(agent_id=agent_id)
            reply: svc_pb.GetAgentResponse = stubs.agents.GetAgent(request, timeout=30)
            return reply

        write(path, DEMO + 'mode = "plan"\nsteer = "yes"\n')
        daemon.proc.send_signal(signal.SIGHUP)
        line = daemon.wait_for_log("refused")
        assert str(path) in line and "[providers.demo]" in line and "'steer'" in line
        assert agent().agent.mode == "default"

        write(path, DEMO + 'mode = "plan"\n')  # no signal: the poll sees it
        daemon.wait_for_log("config reloaded")
        assert agent().agent.mode == "plan"

        session_id = agent().agent.provider_session_id
        write(path, DEMO + 'mode = "plan"\nsteer = true\n')
        daemon.proc.send_signal(signal.SIGHUP)
        line = daemon.wait_for_log("config reloaded")
        assert f"agents restarting when idle: {agent_id}" in line
        until(lambda: agent().agent.provider_session_id != session_id, "the restart")
        url = metrics_url(daemon)
        assert metric(url, "corral_agent_restarts_total") == 1
        assert metric(url, 'corral_config_reloads_total{outcome="refused"}') >= 1
        assert metric(url, 'corral_config_reloads_total{outcome="applied"}') == 2


def test_a_default_mode_the_provider_lacks_stops_the_start_naming_file_table_and_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "corral.toml"
    write(path, DEMO + 'mode = "warp"\n')
    daemon = DaemonProcess(tmp_path / "state", "--config", str(path), "--web-listen", "off")
    daemon.start(expect_ready=False)
    try:
        code, out, err = daemon.wait(timeout=30)
    finally:
        daemon.stop()
    assert (code, out) == (2, "")
    assert (
        f"cannot start: {path}: [providers.demo]: unknown mode 'warp' (one of default, plan)" in err
    )
