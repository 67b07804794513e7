"""A standby says what it is: `corral serve --standby` waiting on a state directory another
daemon holds answers reflection and GetServerInfo to grpcurl, `corral status` and `corral
--version` (behind its token), still refuses agent calls with STANDBY, and once it has taken
over says it serves, with the event log it opened. `corral serve` logs its version as it
starts."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_cli.main import main
from tests.support.client import Stubs, error_details
from tests.support.daemon import DaemonProcess

TOKEN = "standby-token-0123456789"
AUTH = f"authorization: Bearer {TOKEN}"
TIMEOUT = 60.0  # process starts on a loaded 2-core machine


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    path = Path(sys.executable).parent / "grpcurl"
    return subprocess.run(
        [str(path), "-plaintext", *args], capture_output=True, text=True, timeout=TIMEOUT
    )


def port_in(line: str, what: str) -> str:
    match = re.search(rf" {what} on [^\s,;]+:(\d+)", line)
    assert match is not None, line
    return f"127.0.0.1:{match.group(1)}"


def server_info(address: str) -> Any:
    done = grpcurl("-H", AUTH, "-d", "{}", address, "corral.v1.ServerService/GetServerInfo")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_a_standby_answers_grpcurl_and_the_cli_what_it_is_then_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    version = metadata.version("corral")
    holder = DaemonProcess(state, "--drain-delay-s", "0").start()
    standby = DaemonProcess(
        state, "--standby", "--auth-token-file", str(tokens), "--max-prompt-chars", "4321"
    ).start(expect_ready=False)
    try:
        assert holder.first_line.startswith(f"corral {version} (API corral.v1) listening on ")
        assert standby.proc is not None and standby.proc.stdout is not None
        line = standby.proc.stdout.readline()
        assert line.startswith(f"corral {version} (API corral.v1) standby on "), line
        waiting = port_in(line, "standby")

        refused = grpcurl(waiting, "list")
        assert refused.returncode != 0 and "Unauthenticated" in refused.stderr, refused
        listed = grpcurl("-H", AUTH, waiting, "list")
        assert listed.returncode == 0, listed.stderr
        assert {"corral.v1.ServerService", "corral.v1.AgentService"} <= set(listed.stdout.split())
        info = server_info(waiting)
        assert info["state"] == "SERVING_STATE_STANDBY"
        assert (info["version"], info["api_version"]) == (version, "corral.v1")
        assert info["limits"]["max_prompt_chars"] == "4321"  # uint64: a string in JSON
        assert info["features"] == {"tokens": True, "reflection": True, "standby": True}
        assert "scripted" in info["providers"] and "incarnation" not in info
        cli = ["--addr", waiting, "--token-file", str(tokens)]
        assert main([*cli, "status"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith(f"{waiting}: standby")
        assert f"daemon: corral {version} (API corral.v1)" in lines
        assert "features: tokens, reflection, standby" in lines
        assert main([*cli, "--version"]) == 0
        said = capsys.readouterr().out
        assert said.endswith(f"daemon at {waiting}: corral {version} (API corral.v1, standby)\n")

        async with grpc.aio.insecure_channel(waiting) as channel:
            auth = (("authorization", f"Bearer {TOKEN}"),)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await Stubs.of(channel).agents.ListAgents(
                    agent_pb.ListAgentsRequest(), metadata=auth
                )
            details = error_details(raised.value)
            assert (details.code, details.reason) == (grpc.StatusCode.UNAVAILABLE, "STANDBY")

        assert holder.proc is not None
        holder.proc.send_signal(signal.SIGTERM)
        assert holder.wait(TIMEOUT)[0] == 0
        assert port_in(standby.proc.stdout.readline(), "listening") == waiting
        async with grpc.aio.insecure_channel(waiting) as channel:
            serving = await server_grpc.ServerServiceStub(channel).GetServerInfo(
                server_pb.GetServerInfoRequest(), metadata=auth, timeout=TIMEOUT
            )
        assert serving.state == server_pb.SERVING_STATE_SERVING
        assert serving.incarnation and serving.features.standby and serving.features.web
        assert serving.limits.max_prompt_chars == 4321
    finally:
        holder.stop()
        standby.stop()
