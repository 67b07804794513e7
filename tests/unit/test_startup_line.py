"""The start-up line's wording (startup_line.py): only the ports a daemon serves, and what a
client needs to connect, as a standby says too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral_server.server_info import ServerFeatures, ServerInfo, ServerLimits, ServingState
from corral_server.startup_line import serving, standby

LIMITS = ServerLimits(1, 2, 3, 4, 5, 6, 7, 8)


def info(**features: Any) -> ServerInfo:
    return ServerInfo("1.2.3", ServingState.SERVING, LIMITS, (), ServerFeatures(**features))


def test_a_daemon_with_only_its_grpc_port_names_just_that() -> None:
    line = serving(info(reflection=True), "127.0.0.1:5", Path("/s"), 1, "")
    assert line == "corral 1.2.3 (API corral.v1) listening on 127.0.0.1:5; state /s (1 agent)"


def test_the_ports_it_serves_come_in_order_then_the_access_notes() -> None:
    on = info(tls=True, mutual_tls=True, tokens=True, web_url="https://h:2/", metrics_url="m")
    assert serving(on, "unix:/run/c.sock", Path("/s"), 2, "http://h:3/mcp") == (
        "corral 1.2.3 (API corral.v1) listening on unix:/run/c.sock, web https://h:2/, "
        "MCP http://h:3/mcp, metrics m; state /s (2 agents); mutual TLS; tokens; no reflection"
    )


def test_a_standby_names_the_directory_it_waits_for() -> None:
    assert standby(info(tls=True, reflection=True), "127.0.0.1:9", Path("/s")) == (
        "corral 1.2.3 (API corral.v1) standby on 127.0.0.1:9 (waiting for /s); TLS"
    )
