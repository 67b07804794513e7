"""Bearer tokens through the wire, against a real daemon started with a token file: every call
but health needs `authorization: Bearer <token>`, streams and reflection too; the CLI sends one
from --token-file or CORRAL_TOKEN; grpcurl with -H.

A `corral serve` process (flags, SIGHUP reload, start-up errors) is in test_auth_process.py.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral_cli.health import health_stub
from corral_cli.main import main
from tests import conftest
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonThread

TOKENS = ("first-token-0123456789", "second-token-abcdefghij")
WRONG = "not-a-token-zyxwvu9876"
TIMEOUT = 30.0

Capture = pytest.CaptureFixture[str]


def write_tokens(path: Path, *tokens: str) -> Path:
    path.write_text("# corral tokens\n\n" + "".join(f"  {t}  \n" for t in tokens))
    return path


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokens(tmp_path_factory.mktemp("auth") / "tokens", *TOKENS)


@pytest.fixture(scope="module")
def secured(token_file: Path) -> Iterator[DaemonThread]:
    daemon = DaemonThread(replace(conftest.test_config(), auth_token_file=token_file)).start()
    yield daemon
    daemon.stop()


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def list_agents(address: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
    with grpc.insecure_channel(address) as channel:
        Stubs.of(channel).agents.ListAgents(
            agent_pb.ListAgentsRequest(), metadata=metadata, timeout=TIMEOUT
        )


def refusal(address: str, metadata: tuple[tuple[str, str], ...] = ()) -> tuple[str, str]:
    """The status code name and ErrorInfo reason of a refused ListAgents."""
    with pytest.raises(grpc.RpcError) as caught:
        list_agents(address, metadata)
    details = error_details(caught.value)
    return details.code.name, details.reason


def test_a_call_without_a_token_is_unauthenticated_with_reason_token_missing(
    secured: DaemonThread,
) -> None:
    assert refusal(secured.address) == ("UNAUTHENTICATED", "TOKEN_MISSING")


def test_a_call_with_a_wrong_token_is_unauthenticated_with_reason_token_invalid(
    secured: DaemonThread,
) -> None:
    assert refusal(secured.address, bearer(WRONG)) == ("UNAUTHENTICATED", "TOKEN_INVALID")
    # A prefix of a good token, and a good token under another scheme, are wrong too.
    assert refusal(secured.address, bearer(TOKENS[0][:-1]))[1] == "TOKEN_INVALID"
    basic = (("authorization", f"Basic {TOKENS[0]}"),)
    assert refusal(secured.address, basic)[1] == "TOKEN_INVALID"


def test_every_configured_token_is_accepted(secured: DaemonThread) -> None:
    for token in TOKENS:
        list_agents(secured.address, bearer(token))
    # The scheme is case-insensitive (RFC 7235).
    list_agents(secured.address, (("authorization", f"bearer {TOKENS[1]}"),))


def test_a_right_token_lets_a_whole_agent_call_through(
    secured: DaemonThread, tmp_path: Path
) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        created = Stubs.of(channel).agents.CreateAgent(
            create_request(str(tmp_path)), metadata=bearer(TOKENS[0]), timeout=TIMEOUT
        )
    assert created.agent.id


def test_health_answers_without_a_token(secured: DaemonThread) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        reply = health_stub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_stream_without_a_token_is_refused_before_its_first_message(
    secured: DaemonThread,
) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        stream = Stubs.of(channel).events.Subscribe(event_pb.SubscribeRequest(), timeout=TIMEOUT)
        with pytest.raises(grpc.RpcError) as caught:
            next(iter(stream))
    details = error_details(caught.value)
    assert (details.code.name, details.reason) == ("UNAUTHENTICATED", "TOKEN_MISSING")


def test_a_stream_with_a_token_gets_its_snapshot(secured: DaemonThread) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        stream = Stubs.of(channel).events.Subscribe(
            event_pb.SubscribeRequest(), metadata=bearer(TOKENS[1]), timeout=TIMEOUT
        )
        first = next(iter(stream))
        stream.cancel()
    assert first.events


def test_an_undecodable_body_without_a_token_is_unauthenticated_not_decoded(
    secured: DaemonThread,
) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        raw: grpc.UnaryUnaryMultiCallable[bytes, bytes]
        raw = channel.unary_unary("/corral.v1.AgentService/ListAgents")
        with pytest.raises(grpc.RpcError) as caught:
            raw(b"\xff\xff\xff", timeout=TIMEOUT)
    assert error_details(caught.value).reason == "TOKEN_MISSING"


def test_an_unknown_method_without_a_token_is_unauthenticated_not_unimplemented(
    secured: DaemonThread,
) -> None:
    """Without a token a caller learns nothing, not even which methods exist."""
    with grpc.insecure_channel(secured.address) as channel:
        raw: grpc.UnaryUnaryMultiCallable[bytes, bytes]
        raw = channel.unary_unary("/corral.v1.NoSuchService/Probe")
        with pytest.raises(grpc.RpcError) as caught:
            raw(b"", timeout=TIMEOUT)
        assert error_details(caught.value).reason == "TOKEN_MISSING"
        with pytest.raises(grpc.RpcError) as caught:
            raw(b"", metadata=bearer(TOKENS[0]), timeout=TIMEOUT)
        assert error_details(caught.value).code is grpc.StatusCode.UNIMPLEMENTED


def test_tokens_are_never_logged(secured: DaemonThread, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        refusal(secured.address, bearer(WRONG))
        list_agents(secured.address, bearer(TOKENS[0]))
    assert WRONG not in caplog.text and TOKENS[0] not in caplog.text


# --- grpcurl ---------------------------------------------------------------------------------


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    path = Path(sys.executable).parent / "grpcurl"
    return subprocess.run(
        [str(path), "-plaintext", *args], capture_output=True, text=True, timeout=60
    )


def test_grpcurl_needs_the_token_for_reflection_and_calls(secured: DaemonThread) -> None:
    denied = grpcurl(secured.address, "list")
    assert denied.returncode != 0 and "Unauthenticated" in denied.stderr
    header = f"authorization: Bearer {TOKENS[0]}"
    listed = grpcurl("-H", header, secured.address, "list")
    assert listed.returncode == 0, listed.stderr
    assert "corral.v1.AgentService" in listed.stdout.split()
    called = grpcurl("-H", header, "-d", "{}", secured.address, "corral.v1.AgentService/ListAgents")
    assert called.returncode == 0, called.stderr


# --- the CLI ---------------------------------------------------------------------------------


def test_the_cli_without_a_token_says_unauthenticated(
    secured: DaemonThread, capsys: Capture
) -> None:
    assert main(["--addr", secured.address, "ls"]) == 1
    err = capsys.readouterr().err
    assert "UNAUTHENTICATED" in err and "TOKEN_MISSING" in err
    assert "hint: the daemon wants a token: pass --token-file FILE or set CORRAL_TOKEN" in err


def test_the_cli_sends_the_first_token_of_token_file(
    secured: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    mine = write_tokens(tmp_path / "mine", TOKENS[1], WRONG)
    assert main(["--addr", secured.address, "--token-file", str(mine), "ls"]) == 0
    # Also after the command, like every global option.
    assert main(["--addr", secured.address, "ls", "--token-file", str(mine)]) == 0
    capsys.readouterr()


def test_the_cli_sends_corral_token_from_the_environment(
    secured: DaemonThread, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_TOKEN", TOKENS[0])
    assert main(["--addr", secured.address, "run", "--cwd", str(tmp_path), "hi"]) == 0
    assert capsys.readouterr().out == "You said: hi\n"
    # --token-file wins over the environment.
    wrong = write_tokens(tmp_path / "wrong", WRONG)
    assert main(["--addr", secured.address, "--token-file", str(wrong), "ls"]) == 1
    assert "TOKEN_INVALID" in capsys.readouterr().err


def test_the_cli_streams_with_its_token(
    secured: DaemonThread, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_TOKEN", TOKENS[1])
    assert main(["--addr", secured.address, "run", "--cwd", str(tmp_path), "hello"]) == 0
    agent = capsys.readouterr().err.split()[1]
    follow = ["--addr", secured.address, "logs", agent, "-f", "--until-idle"]
    assert main(follow) == 0
    assert "hello" in capsys.readouterr().out


def test_the_cli_names_an_unusable_token_file(tmp_path: Path, capsys: Capture) -> None:
    missing = tmp_path / "absent"
    assert main(["--addr", "127.0.0.1:1", "--token-file", str(missing), "ls"]) == 2
    assert f"cannot read the token file {missing}" in capsys.readouterr().err
    empty = write_tokens(tmp_path / "empty")
    assert main(["--addr", "127.0.0.1:1", "--token-file", str(empty), "ls"]) == 2
    assert "holds no token" in capsys.readouterr().err
