"""`corral serve --mcp-listen`: the MCP endpoint in the daemon process, on loopback only, and
a SIGTERM still drains the daemon (the HTTP server takes no signal of its own)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx2

from tests.support.daemon import DaemonProcess

MCP_URL = re.compile(r", MCP (http://127\.0\.0\.1:\d+/mcp)[,;]")


def test_the_daemon_serves_mcp_and_still_drains_on_sigterm(tmp_path: Path) -> None:
    served = DaemonProcess(
        tmp_path / "state", "--drain-delay-s", "0", "--mcp-listen", "127.0.0.1:0"
    ).start()
    try:
        match = MCP_URL.search(served.first_line)
        assert match is not None, served.first_line
        # Without an agent's token the endpoint answers 401 (and is there to answer).
        reply = httpx2.post(match.group(1), json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert reply.status_code == 401
        assert served.proc is not None
        served.proc.send_signal(signal.SIGTERM)
        code, _, err = served.wait()
        assert code == 0, err
        assert "stopped" in err
    finally:
        served.stop()


def test_mcp_listen_refuses_a_non_loopback_address(tmp_path: Path) -> None:
    proc = DaemonProcess(tmp_path / "s", "--mcp-listen", "0.0.0.0:0").start(expect_ready=False)
    code, _, err = proc.wait()
    assert code == 2 and "loopback only" in err
