"""`corral serve` says it serves in one line on stdout, and nothing else at the default log
level: the version, the gRPC address, the web, MCP and metrics URLs it serves (each answering),
the state directory with the agents it kept, and the access notes."""

from __future__ import annotations

import re
import signal
from importlib import metadata
from pathlib import Path

import grpc
import httpx2 as httpx

from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonProcess

LINE = re.compile(
    r"corral (?P<version>\S+) \(API corral\.v1\) listening on 127\.0\.0\.1:(?P<port>\d+), "
    r"web (?P<web>http://127\.0\.0\.1:\d+/), MCP (?P<mcp>http://127\.0\.0\.1:\d+/mcp), "
    r"metrics (?P<metrics>http://127\.0\.0\.1:\d+/metrics); "
    r"state (?P<state>\S+) \((?P<agents>\d+) agents?\)(?P<notes>.*)\n"
)
ALL_PORTS = ("--web-listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0")
METRICS = ("--metrics-listen", "127.0.0.1:0", "--drain-delay-s", "0")


def stopped(daemon: DaemonProcess) -> tuple[str, str]:
    """SIGTERM, then everything the daemon printed (stdout, stderr)."""
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    code, out, err = daemon.wait()
    assert code == 0, err
    return daemon.first_line + out, err


def test_one_line_names_the_version_every_address_and_the_state_directory(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    daemon = DaemonProcess(state, *ALL_PORTS, *METRICS).start()
    try:
        line = LINE.fullmatch(daemon.first_line)
        assert line is not None, daemon.first_line
        assert line["version"] == metadata.version("corral")
        assert (line["state"], line["agents"], line["notes"]) == (str(state), "0", "")
        assert httpx.get(line["web"], timeout=30).status_code == 200  # the dashboard
        assert httpx.post(line["mcp"], json={}, timeout=30).status_code == 401  # no agent token
        assert "corral_agents" in httpx.get(line["metrics"], timeout=30).text
        out, err = stopped(daemon)
    finally:
        daemon.stop()
    assert out == daemon.first_line  # the one line, and no other
    # Nothing on stderr before the drain: no second "serving" line, no web server chatter.
    assert err.splitlines()[0].endswith("INFO corral: draining (delay 0.0s, grace 10.0s)"), err


async def test_a_restart_counts_the_agents_it_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = DaemonProcess(state, "--drain-delay-s", "0").start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            await Stubs.of(channel).agents.CreateAgent(create_request(str(tmp_path)))
        stopped(first)
    finally:
        first.stop()
    again = DaemonProcess(state, "--drain-delay-s", "0").start()
    try:
        assert f"; state {state} (1 agent)" in again.first_line, again.first_line
    finally:
        again.stop()
