"""The CLI tells what the daemon says about itself (GetServerInfo): `corral status` prints its
version, event log, limits, providers and features after the state and the agents, and
`corral --version` prints the daemon's version under the CLI's when one answers at --addr,
wherever --addr stands. A standby's answers are in test_server_info_standby.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_cli.main import main
from tests import conftest
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]
VERSION = metadata.version("corral")


@pytest.fixture(scope="module")
def served() -> Iterator[DaemonThread]:
    config = replace(conftest.test_config(), web_listen="127.0.0.1:0", max_request_bytes=7_000_000)
    daemon = DaemonThread(config).start()
    yield daemon
    daemon.stop()


def incarnation_of(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        info = server_grpc.ServerServiceStub(channel).GetServerInfo(
            server_pb.GetServerInfoRequest(), timeout=30
        )
    return info.incarnation


def test_status_prints_what_the_daemon_says_about_itself(
    served: DaemonThread, capsys: Capture
) -> None:
    assert served.daemon is not None and served.daemon.web is not None
    assert main(["--addr", served.address, "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{served.address}: serving"
    daemon, limits, prompts, providers, features = lines[2:7]
    assert daemon.startswith(
        f"daemon: corral {VERSION} (API corral.v1), event log {incarnation_of(served.address)} "
        "at revision "
    )
    assert limits == "limits: requests of 7000000 bytes and 1000 ids, 256 calls per connection"
    assert prompts == "prompts: 1000000 chars, 2088960 bytes of text, 1000 parts"
    assert providers.startswith("providers: scripted")
    assert features == f"features: web {served.daemon.web.url}, reflection"
    assert lines[7] == f"cli: corral {VERSION}"

    assert main(["--addr", served.address, "--json", "status"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["server"]["version"] == VERSION
    assert answer["server"]["state"] == "SERVING_STATE_SERVING"
    assert answer["server"]["limits"]["max_request_bytes"] == "7000000"


@pytest.mark.parametrize("order", ["addr-first", "version-first"])
def test_version_adds_the_daemons_when_one_answers(
    served: DaemonThread, capsys: Capture, order: str
) -> None:
    addr = ["--addr", served.address]
    argv = [*addr, "--version"] if order == "addr-first" else ["--version", *addr]
    assert main(argv) == 0
    assert capsys.readouterr().out == (
        f"corral {VERSION}\ndaemon at {served.address}: corral {VERSION} (API corral.v1, serving)\n"
    )
    assert main([*argv, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["cli_version"] == VERSION
    assert (answer["daemon"]["addr"], answer["daemon"]["version"]) == (served.address, VERSION)


def test_version_without_a_daemon_prints_the_clis_alone(tmp_path: Path, capsys: Capture) -> None:
    assert main(["--version", "--addr", f"unix:{tmp_path / 'none'}"]) == 0
    assert capsys.readouterr().out == f"corral {VERSION}\n"


def test_status_of_a_daemon_without_server_info_says_what_health_says(capsys: Capture) -> None:
    older = grpc.server(futures.ThreadPoolExecutor(max_workers=2))  # health only
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), older)
    port = older.add_insecure_port("127.0.0.1:0")
    older.start()
    try:
        assert main(["--addr", f"127.0.0.1:{port}", "status"]) == 0
    finally:
        older.stop(0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"127.0.0.1:{port}: serving (UNIMPLEMENTED")
    assert not any(line.startswith("daemon: ") for line in lines)
    assert lines[-1] == f"cli: corral {VERSION}"
