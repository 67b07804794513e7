"""TLS and mutual TLS through the wire, with certificate authorities the tests make (openssl):
Python stubs, grpcurl and the CLI reach a TLS daemon; plaintext to a TLS port fails at once;
under mutual TLS a client certificate from another authority (or none) is refused; tokens work
over TLS; bad certificate flags stop the start-up with a message."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli.health import health_stub
from corral_cli.main import main
from corral_server.rpc.tls import TlsFiles
from tests import conftest
from tests.support.client import Stubs, error_details
from tests.support.daemon import DaemonProcess, DaemonThread
from tests.support.tls import KeyPair, issue, make_authority

TOKEN = "tls-token-0123456789"
TIMEOUT = 30.0

Capture = pytest.CaptureFixture[str]


@dataclass(frozen=True)
class Pki:
    ca: KeyPair
    server: KeyPair
    client: KeyPair
    # Another authority and a client certificate it signed: trusted by nobody here.
    other_ca: KeyPair
    intruder: KeyPair


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    home = tmp_path_factory.mktemp("pki")
    ca, other = make_authority(home, "corral-ca"), make_authority(home, "other-ca")
    return Pki(
        ca=ca,
        server=issue(ca, home, "daemon", server=True),
        client=issue(ca, home, "alice", server=False),
        other_ca=other,
        intruder=issue(other, home, "mallory", server=False),
    )


def start(pki: Pki, *, client_ca: bool = False, tokens: Path | None = None) -> DaemonThread:
    tls = TlsFiles(pki.server.cert, pki.server.key, pki.ca.cert if client_ca else None)
    config = replace(conftest.test_config(), tls=tls, auth_token_file=tokens)
    return DaemonThread(config).start()


@pytest.fixture(scope="module")
def tls(pki: Pki) -> Iterator[DaemonThread]:
    daemon = start(pki)
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def mutual(pki: Pki) -> Iterator[DaemonThread]:
    daemon = start(pki, client_ca=True)
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def tls_tokens(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonThread]:
    tokens = tmp_path_factory.mktemp("tls-tokens") / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    daemon = start(pki, tokens=tokens)
    yield daemon
    daemon.stop()


def credentials(ca: KeyPair, client: KeyPair | None = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=ca.cert.read_bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None,
    )


def health(channel: grpc.Channel) -> int:
    request = health_pb2.HealthCheckRequest(service="")
    status: int = health_stub(channel).Check(request, timeout=TIMEOUT).status
    return status


def refused(channel: grpc.Channel) -> grpc.RpcError:
    """The error of a health check that must fail (with no wait-for-ready, it fails at once
    when the connection does)."""
    with pytest.raises(grpc.RpcError) as caught:
        health(channel)
    return caught.value


def test_a_tls_client_that_trusts_the_authority_is_served(tls: DaemonThread, pki: Pki) -> None:
    with grpc.secure_channel(tls.address, credentials(pki.ca)) as channel:
        assert health(channel) == health_pb2.HealthCheckResponse.SERVING
        Stubs.of(channel).agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=TIMEOUT)


def test_plaintext_to_a_tls_port_fails_at_once_as_unavailable(tls: DaemonThread) -> None:
    with grpc.insecure_channel(tls.address) as channel:
        assert refused(channel).code() is grpc.StatusCode.UNAVAILABLE


def test_a_client_that_does_not_trust_the_server_certificate_is_refused(
    tls: DaemonThread, pki: Pki
) -> None:
    with grpc.secure_channel(tls.address, credentials(pki.other_ca)) as channel:
        assert refused(channel).code() is grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_serves_a_client_certificate_from_its_authority(
    mutual: DaemonThread, pki: Pki
) -> None:
    with grpc.secure_channel(mutual.address, credentials(pki.ca, pki.client)) as channel:
        assert health(channel) == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("who", ["another authority", "no certificate"])
def test_mutual_tls_refuses_a_client_without_a_certificate_of_its_authority(
    mutual: DaemonThread, pki: Pki, who: str
) -> None:
    client = pki.intruder if who == "another authority" else None
    with grpc.secure_channel(mutual.address, credentials(pki.ca, client)) as channel:
        assert refused(channel).code() is grpc.StatusCode.UNAVAILABLE


def test_tokens_over_tls(tls_tokens: DaemonThread, pki: Pki) -> None:
    token = grpc.access_token_call_credentials(TOKEN)
    with grpc.secure_channel(
        tls_tokens.address, grpc.composite_channel_credentials(credentials(pki.ca), token)
    ) as channel:
        Stubs.of(channel).agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=TIMEOUT)
    with grpc.secure_channel(tls_tokens.address, credentials(pki.ca)) as channel:
        assert health(channel) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as caught:
            Stubs.of(channel).agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=TIMEOUT)
    assert error_details(caught.value).reason == "TOKEN_MISSING"


# --- grpcurl ---------------------------------------------------------------------------------


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    path = Path(sys.executable).parent / "grpcurl"
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60)


def test_grpcurl_lists_and_calls_over_tls(tls: DaemonThread, pki: Pki) -> None:
    listed = grpcurl("-cacert", str(pki.ca.cert), tls.address, "list")
    assert listed.returncode == 0, listed.stderr
    assert "corral.v1.AgentService" in listed.stdout.split()
    called = grpcurl(
        "-cacert", str(pki.ca.cert), "-d", "{}", tls.address, "corral.v1.AgentService/ListAgents"
    )
    assert called.returncode == 0, called.stderr


def test_grpcurl_with_a_client_certificate_and_a_token(
    mutual: DaemonThread, tls_tokens: DaemonThread, pki: Pki
) -> None:
    client = ("-cert", str(pki.client.cert), "-key", str(pki.client.key))
    done = grpcurl("-cacert", str(pki.ca.cert), *client, mutual.address, "list")
    assert done.returncode == 0, done.stderr
    header = ("-H", f"authorization: Bearer {TOKEN}")
    done = grpcurl("-cacert", str(pki.ca.cert), *header, tls_tokens.address, "list")
    assert done.returncode == 0, done.stderr


# --- the CLI ---------------------------------------------------------------------------------


def test_the_cli_runs_a_turn_over_tls(
    tls: DaemonThread, pki: Pki, tmp_path: Path, capsys: Capture
) -> None:
    argv = ["--addr", tls.address, "--tls-ca", str(pki.ca.cert)]
    assert main([*argv, "run", "--cwd", str(tmp_path), "over tls"]) == 0
    assert capsys.readouterr().out == "You said: over tls\n"


def test_the_cli_without_tls_flags_fails_against_a_tls_port(
    tls: DaemonThread, capsys: Capture
) -> None:
    assert main(["--addr", tls.address, "ls"]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_the_cli_with_a_client_certificate_and_a_token(
    mutual: DaemonThread,
    tls_tokens: DaemonThread,
    pki: Pki,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = ["--tls-ca", str(pki.ca.cert)]
    client = ["--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key)]
    assert main(["--addr", mutual.address, *ca, *client, "ls"]) == 0
    intruder = ["--tls-cert", str(pki.intruder.cert), "--tls-key", str(pki.intruder.key)]
    assert main(["--addr", mutual.address, *ca, *intruder, "ls"]) == 1
    monkeypatch.setenv("CORRAL_TOKEN", TOKEN)
    assert main(["--addr", tls_tokens.address, *ca, "ls"]) == 0
    capsys.readouterr()


def test_the_cli_names_an_unreadable_certificate(tmp_path: Path, capsys: Capture) -> None:
    missing = tmp_path / "ca.pem"
    assert main(["--addr", "127.0.0.1:1", "--tls-ca", str(missing), "ls"]) == 2
    assert f"--tls-ca {missing}: cannot read it" in capsys.readouterr().err
    assert main(["--addr", "127.0.0.1:1", "--tls-cert", str(missing), "ls"]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


# --- start-up refusals -----------------------------------------------------------------------


def refused_start(tmp_path: Path, *args: str) -> str:
    proc = DaemonProcess(tmp_path / "state", *args).start(expect_ready=False)
    code, _, err = proc.wait()
    assert code == 2 and "Traceback" not in err, err
    return err


def test_tls_flags_that_cannot_work_stop_the_start_up(tmp_path: Path, pki: Pki) -> None:
    cert, key = str(pki.server.cert), str(pki.server.key)
    assert "go together" in refused_start(tmp_path, "--tls-cert", cert)
    needs = refused_start(tmp_path, "--tls-client-ca", str(pki.ca.cert))
    assert "--tls-client-ca needs --tls-cert" in needs
    absent = tmp_path / "absent.pem"
    unreadable = refused_start(tmp_path, "--tls-cert", str(absent), "--tls-key", key)
    assert f"--tls-cert {absent}: cannot read it" in unreadable
    mismatch = refused_start(tmp_path, "--tls-cert", cert, "--tls-key", str(pki.client.key))
    assert "are not a certificate and its unencrypted private key" in mismatch
    not_ca = refused_start(
        tmp_path, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", str(pki.ca.key)
    )
    assert "--tls-client-ca" in not_ca


def test_corral_serve_with_tls_says_so_and_answers_tls(tmp_path: Path, pki: Pki) -> None:
    cert, key = str(pki.server.cert), str(pki.server.key)
    proc = DaemonProcess(
        tmp_path / "state",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--tls-client-ca",
        str(pki.ca.cert),
    ).start()
    try:
        assert "mutual TLS" in proc.first_line
        with grpc.secure_channel(proc.address, credentials(pki.ca, pki.client)) as channel:
            assert health(channel) == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.stop()
