"""Revocation of a stream that is mid-write, through the wire against a `corral serve`
process: a raw HTTP/2 client subscribes with a token and stops granting flow-control window, so
the daemon's write of a large timeline row stays pending (grpc core takes no status while a
send is pending). The token is dropped and SIGHUP reloads the file; when the client reads
again, that pending write completes, then the stream ends with UNAUTHENTICATED / TOKEN_REVOKED,
and nothing else the daemon had to send (later rows, an agent created after the reload) reaches
it."""

from __future__ import annotations

import base64
import signal
from pathlib import Path

import grpc
from google.rpc import error_details_pb2, status_pb2

from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonProcess
from tests.support.raw_h2 import NeverReadingClient

KEPT, DROPPED = "kept-token-0123456789", "dropped-token-abcdefgh"
WINDOW = 65_535  # HTTP/2's default initial window: what the daemon may send unread
ROW_CHARS = 100_000  # one timeline row larger than the window: its write stays pending
UNAUTHENTICATED = str(grpc.StatusCode.UNAUTHENTICATED.value[0])


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def reason_of(trailers: dict[str, str]) -> str:
    raw = trailers["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(base64.b64decode(raw + "=" * (-len(raw) % 4)))
    info = error_details_pb2.ErrorInfo()
    assert status.details and status.details[0].Unpack(info)
    return info.reason


def run_turns(address: str, cwd: Path, count: int) -> str:
    """An agent (the kept token) and `count` finished turns whose prompts are big rows marked
    `prompt-N:`; the agent's id."""
    with grpc.insecure_channel(address) as channel:
        stubs = Stubs.of(channel)
        agent_id = stubs.agents.CreateAgent(
            create_request(str(cwd)), metadata=bearer(KEPT), timeout=30
        ).agent.id
        for n in range(1, count + 1):
            body = f"prompt-{n}:" + "x" * ROW_CHARS
            request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(body))
            replies = stubs.turns.StreamTurn(request, metadata=bearer(KEPT), timeout=30)
            assert any(r.HasField("turn_completed") for r in replies)
    return str(agent_id)


def test_a_stream_revoked_mid_write_stops_after_that_write_and_then_says_token_revoked(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{KEPT}\n{DROPPED}\n")
    tokens.chmod(0o600)
    # A long stall deadline: the stream book must not end the stalled stream first.
    args = ("--auth-token-file", str(tokens), "--stream-stall-s", "600")
    proc = DaemonProcess(tmp_path / "state", *args).start()
    client = NeverReadingClient(proc.address, 1, headers=bearer(DROPPED))
    try:
        (stream_id,) = client.results
        run_turns(proc.address, tmp_path, 3)
        before = client.receive_without_reading(stream_id, WINDOW, until_s=30)
        assert len(before) == WINDOW  # the window is used up: the next write is pending
        assert b"prompt-1:" in before and b"prompt-2:" not in before

        tokens.write_text(f"{KEPT}\n")
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGHUP)
        proc.wait_for_log("revoked 1 open call(s)")
        with grpc.insecure_channel(proc.address) as channel:
            later = Stubs.of(channel).agents.CreateAgent(
                create_request(str(tmp_path), title="after-the-reload"),
                metadata=bearer(KEPT),
                timeout=30,
            )

        result = client.read_all(until_s=30)[stream_id]
        assert result.trailers.get("grpc-status") == UNAUTHENTICATED, result.trailers
        assert reason_of(result.trailers) == "TOKEN_REVOKED"
        delivered = bytes(result.data)
        rows = [
            e.timeline_row_appended.row
            for m in result.messages()
            for e in m.events
            if e.HasField("timeline_row_appended")
        ]
        # The pending write (the first big row) completed whole; nothing was written after it.
        assert any("prompt-1:" in str(row) for row in rows)
        assert b"prompt-2:" not in delivered and b"prompt-3:" not in delivered
        assert later.agent.id.encode() not in delivered
        assert b"after-the-reload" not in delivered
        assert sum(5 + m.ByteSize() for m in result.messages()) == len(delivered)
    finally:
        client.close()
        proc.stop()
