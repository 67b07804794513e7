"""Who may scrape the metrics: `--metrics-listen` off loopback needs --auth-token-file (refused
at start-up otherwise, before anything binds), and the endpoint then answers only a good bearer
token (401 without one, and once the token is revoked); on loopback it stays open, with or
without tokens. The token-guarded endpoint is served on loopback here with the config switch
`corral serve` sets off loopback (tests bind nothing else)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral_server.app import Config
from tests.support.client import Stubs
from tests.support.daemon import DaemonProcess, DaemonThread

TOKEN, OTHER = "metrics-token-0123456789", "other-token-9876543210"


def scrape(port: int, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n{OTHER}\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def guarded(token_file: Path) -> Iterator[DaemonThread]:
    config = Config(metrics_listen="127.0.0.1:0", auth_token_file=token_file, metrics_token=True)
    daemon = DaemonThread(config).start()
    yield daemon
    daemon.stop()


def test_metrics_off_loopback_without_a_token_file_stop_the_start_up(tmp_path: Path) -> None:
    for address in ("0.0.0.0:0", "[::]:9464", "192.0.2.1:9464"):
        proc = DaemonProcess(tmp_path / "state", "--metrics-listen", address)
        code, out, err = proc.start(expect_ready=False).wait()
        assert code == 2 and "corral listening" not in out and "Traceback" not in err
        assert f"refusing --metrics-listen {address}: not a loopback address" in err
        assert "--auth-token-file" in err


def test_guarded_metrics_answer_only_a_good_bearer_token(
    guarded: DaemonThread, token_file: Path
) -> None:
    assert guarded.daemon is not None
    port = guarded.daemon.metrics_port
    code, body = scrape(port)
    assert code == 401 and "corral_" not in body
    assert scrape(port, "not-a-token-000000")[0] == 401
    code, body = scrape(port, TOKEN)
    assert code == 200 and "corral_turns_total" in body
    token_file.write_text(f"{OTHER}\n")

    async def reload() -> None:
        assert guarded.daemon is not None
        guarded.daemon.reload_tokens()

    guarded.run(reload())
    assert scrape(port, TOKEN)[0] == 401  # revoked
    assert scrape(port, OTHER)[0] == 200


def test_loopback_metrics_stay_open_with_tokens_on(tmp_path: Path, token_file: Path) -> None:
    proc = DaemonProcess(
        tmp_path / "state", "--auth-token-file", str(token_file), "--metrics-listen", "127.0.0.1:0"
    ).start()
    try:
        line = proc.wait_for_log("metrics on")
        match = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match is not None, line
        code, body = scrape(int(match.group(1)))
        assert code == 200 and "corral_agents" in body
    finally:
        proc.stop()


def test_calls_refused_for_their_token_count_once_and_let_in_streams_count_nothing(
    guarded: DaemonThread,
) -> None:
    assert guarded.daemon is not None
    port = guarded.daemon.metrics_port
    bearer = (("authorization", f"Bearer {TOKEN}"),)
    with grpc.insecure_channel(guarded.address) as channel:
        stubs = Stubs.of(channel)
        with pytest.raises(grpc.RpcError):
            stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=30)
        with pytest.raises(grpc.RpcError):
            list(stubs.events.Subscribe(event_pb.SubscribeRequest(), timeout=30))
        # Let in: a stream the token wrapper writes (rpc/bearer.py), cancelled by its client
        # after its first message (nobody is answered an error), then a unary call.
        stream = stubs.events.Subscribe(event_pb.SubscribeRequest(), metadata=bearer)
        assert next(stream).events
        stream.cancel()
        stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), metadata=bearer, timeout=30)
    code, body = scrape(port, TOKEN)
    assert code == 200
    errors = dict(re.findall(r'corral_rpc_errors_total\{code="(\w+)"\} (\S+)', body))
    assert errors == {"UNAUTHENTICATED": "2.0"}
