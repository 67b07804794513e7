"""Large tool output through the wire: an output over 256 KiB is kept apart from its row (the
row holds a 4 KiB preview, the size and a blob id) and FetchToolOutput pages the whole of it,
byte for byte, each answer under a default client's 4 MiB; the output lives as long as its
row (rewind, retention, restart); bad requests are clear errors. With and without a state
directory."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli.main import main
from corral_server.app import Config
from tests.support.client import (
    ErrorDetails,
    Stubs,
    SyncStubs,
    create_request,
    error_details,
    text,
)
from tests.support.daemon import DaemonThread

MIB = 1024 * 1024
DEFAULT_CLIENT_LIMIT = 4 * MIB


def expected_output(size: int) -> bytes:
    """`/tool-output`'s documented text, written out independently of the provider."""
    lines = bytearray()
    i = 0
    while len(lines) < size:
        lines += b"%09d\n" % i
        i += 1
    return bytes(lines[:size])


@pytest.fixture(params=["memory", "state_dir"])
def daemon(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DaemonThread]:
    state_dir = tmp_path / "state" if request.param == "state_dir" else None
    thread = DaemonThread(Config(state_dir=state_dir)).start()
    yield thread
    thread.stop()


@pytest.fixture
def stubs(daemon: DaemonThread) -> Iterator[SyncStubs]:
    with grpc.insecure_channel(daemon.address) as channel:  # a default client: 4 MiB
        yield Stubs.of(channel)


def run_turn(stubs: SyncStubs, agent_id: str, *lines: str) -> str:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    events = list(stubs.turns.StreamTurn(request))
    assert events[-1].WhichOneof("event") == "turn_completed"
    return str(events[0].turn_started.turn_id)


def agent_after(stubs: SyncStubs, cwd: Path, *lines: str) -> str:
    """A new agent that ran one turn of `lines`."""
    agent_id = str(stubs.agents.CreateAgent(create_request(str(cwd))).agent.id)
    run_turn(stubs, agent_id, *lines)
    return agent_id


def tool_rows(stubs: SyncStubs, agent_id: str) -> list[timeline_pb.TimelineRow]:
    page = stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0))
    return [row for row in page.rows if row.item.HasField("tool_call")]


def blob_ids(stubs: SyncStubs, agent_id: str) -> list[str]:
    return [row.item.tool_call.output_ref.blob_id for row in tool_rows(stubs, agent_id)]


def fetch_all(stubs: SyncStubs, agent_id: str, blob_id: str, limit: int = 0) -> bytes:
    data, offset = b"", 0
    while True:
        request = tl_pb.FetchToolOutputRequest(
            agent_id=agent_id, blob_id=blob_id, offset=offset, limit=limit
        )
        chunk = stubs.timeline.FetchToolOutput(request)
        assert chunk.ByteSize() < DEFAULT_CLIENT_LIMIT and chunk.offset == offset
        data += chunk.data
        offset += len(chunk.data)
        if offset == chunk.size_bytes:
            return data
        assert chunk.data  # a chunk short of the end always carries bytes


def fetch_error(stubs: SyncStubs, agent_id: str, blob_id: str, offset: int = 0) -> ErrorDetails:
    request = tl_pb.FetchToolOutputRequest(agent_id=agent_id, blob_id=blob_id, offset=offset)
    with pytest.raises(grpc.RpcError) as caught:
        stubs.timeline.FetchToolOutput(request)
    return error_details(caught.value)


def test_a_10_mib_output_round_trips_byte_exact_through_pages(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output shell 10485760")
    [row] = [r for r in tool_rows(stubs, agent_id) if r.item.tool_call.HasField("output_ref")]
    call = row.item.tool_call
    ref = call.output_ref
    want = expected_output(10 * MIB)
    assert (ref.size_bytes, ref.preview_truncated, ref.json) == (10 * MIB, True, False)
    assert call.output.string_value.encode() == want[:4096]
    assert row.ByteSize() < 8 * 1024  # the row itself stays small
    assert fetch_all(stubs, agent_id, ref.blob_id) == want  # 1 MiB chunks by default
    assert fetch_all(stubs, agent_id, ref.blob_id, limit=64 * MIB) == want  # 3 MiB at most
    assert fetch_all(stubs, agent_id, ref.blob_id, limit=999_999) == want


def test_an_output_under_the_threshold_stays_whole_in_its_row(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output small 262144")
    call = tool_rows(stubs, agent_id)[-1].item.tool_call
    assert not call.HasField("output_ref")
    assert call.output.string_value.encode() == expected_output(262_144)


def test_bad_requests_are_clear_errors_and_the_end_answers_no_data(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output shell 300000")
    blob_id = blob_ids(stubs, agent_id)[-1]
    past = fetch_error(stubs, agent_id, blob_id, offset=300_001)
    assert (past.code, past.fields) == (grpc.StatusCode.INVALID_ARGUMENT, ("offset",))
    assert "300000 bytes" in past.message
    end = stubs.timeline.FetchToolOutput(
        tl_pb.FetchToolOutputRequest(agent_id=agent_id, blob_id=blob_id, offset=300_000)
    )
    assert (end.data, end.size_bytes) == (b"", 300_000)
    unknown = fetch_error(stubs, agent_id, "0" * 32)
    assert (unknown.code, unknown.reason) == (
        grpc.StatusCode.NOT_FOUND,
        "TOOL_OUTPUT_NOT_FOUND",
    )
    empty = fetch_error(stubs, agent_id, "")
    assert (empty.code, empty.fields) == (grpc.StatusCode.INVALID_ARGUMENT, ("blob_id",))
    other = fetch_error(stubs, "no-such-agent", blob_id)
    assert (other.code, other.reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND")


def test_a_rows_cursor_names_its_output_as_its_blob_id_does(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output shell 300000")
    page = stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0))
    [row] = [r for r in page.rows if r.item.tool_call.HasField("output_ref")]

    def at(seq: int, epoch: str = page.epoch, blob_id: str = "") -> tl_pb.FetchToolOutputRequest:
        cursor = timeline_pb.Cursor(epoch=epoch, seq=seq)
        return tl_pb.FetchToolOutputRequest(agent_id=agent_id, cursor=cursor, blob_id=blob_id)

    chunk = stubs.timeline.FetchToolOutput(at(row.seq))
    assert (chunk.data, chunk.size_bytes) == (expected_output(300_000), 300_000)
    for request, code, reason, fields in (
        (at(1), grpc.StatusCode.NOT_FOUND, "TOOL_OUTPUT_NOT_FOUND", ()),  # the prompt's row
        (at(row.seq, "f" * 32), grpc.StatusCode.NOT_FOUND, "TOOL_OUTPUT_NOT_FOUND", ()),
        (at(0), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ("cursor.seq",)),
        (
            at(row.seq, blob_id="x"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
            ("cursor",),
        ),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            stubs.timeline.FetchToolOutput(request)
        details = error_details(caught.value)
        assert (details.code, details.reason, details.fields) == (code, reason, fields)


def test_rewind_drops_the_outputs_of_the_rows_it_drops_and_a_restart_keeps_the_rest(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        with grpc.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = agent_after(stubs, tmp_path, "/echo", "/tool-output one 300000")
            second = run_turn(stubs, agent_id, "/echo", "/tool-output two 400000")
            kept, dropped = blob_ids(stubs, agent_id)
            rewind = turn_pb.RewindRequest(agent_id=agent_id, message_id=f"{second}-user")
            stubs.turns.Rewind(rewind)
            assert blob_ids(stubs, agent_id) == [kept]
            assert fetch_all(stubs, agent_id, kept) == expected_output(300_000)
            assert fetch_error(stubs, agent_id, dropped).reason == "TOOL_OUTPUT_NOT_FOUND"
    finally:
        first.stop()
    with closing(sqlite3.connect(state / "corral.db")) as db, db:  # swept at the next open, below
        assert db.execute("SELECT count(*) FROM tool_outputs").fetchone()[0] == 2
    again = DaemonThread(Config(state_dir=state)).start()
    try:
        with grpc.insecure_channel(again.address) as channel:
            stubs = Stubs.of(channel)
            assert fetch_all(stubs, agent_id, kept) == expected_output(300_000)
            assert fetch_error(stubs, agent_id, dropped).reason == "TOOL_OUTPUT_NOT_FOUND"
    finally:
        again.stop()
    with closing(sqlite3.connect(state / "corral.db")) as db, db:
        assert db.execute("SELECT blob_id FROM tool_outputs").fetchall() == [(kept,)]


def test_a_rehydrating_reload_drops_the_outputs_with_the_rows(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output shell 300000")
    [blob_id] = blob_ids(stubs, agent_id)
    reload = agent_pb.ReloadAgentRequest(agent_id=agent_id, rehydrate_from_disk=True)
    stubs.agents.ReloadAgent(reload)
    assert tool_rows(stubs, agent_id) == []
    assert fetch_error(stubs, agent_id, blob_id).reason == "TOOL_OUTPUT_NOT_FOUND"


def test_retention_drops_an_output_with_its_row(tmp_path: Path) -> None:
    thread = DaemonThread(Config(state_dir=tmp_path / "state", timeline_retain_rows=3)).start()
    try:
        with grpc.insecure_channel(thread.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = agent_after(stubs, tmp_path, "/tool-output shell 300000")
            blob_id = blob_ids(stubs, agent_id)[-1]
            assert fetch_all(stubs, agent_id, blob_id) == expected_output(300_000)
            run_turn(stubs, agent_id, "/reply later")
            run_turn(stubs, agent_id, "/reply later still")
            assert fetch_error(stubs, agent_id, blob_id).reason == "TOOL_OUTPUT_NOT_FOUND"
    finally:
        thread.stop()
    with closing(sqlite3.connect(tmp_path / "state" / "corral.db")) as db, db:
        assert db.execute("SELECT count(*) FROM tool_outputs").fetchone()[0] == 0


def test_the_cli_shows_the_preview_and_streams_the_whole_output(
    daemon: DaemonThread,
    stubs: SyncStubs,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output shell 5000000")
    blob_id = blob_ids(stubs, agent_id)[-1]
    capsysbinary.readouterr()
    assert main(["--addr", daemon.address, "logs", agent_id]) == 0
    logs = capsysbinary.readouterr().out.decode()
    assert f"[output of 5000000 bytes: corral output {agent_id} {blob_id}]" in logs
    assert "000000000 ↵ 000000001 ↵" in logs  # the preview, on one line
    assert main(["--addr", daemon.address, "output", agent_id[:8], blob_id]) == 0
    assert capsysbinary.readouterr().out == expected_output(5_000_000)


def test_the_projected_logs_name_the_agent_in_the_output_hint(
    daemon: DaemonThread,
    stubs: SyncStubs,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    agent_id = agent_after(stubs, tmp_path, "/tool-output shell 300000")
    blob_id = blob_ids(stubs, agent_id)[-1]
    capsysbinary.readouterr()
    assert main(["--addr", daemon.address, "logs", "--projected", agent_id]) == 0
    logs = capsysbinary.readouterr().out.decode()
    # The tool call's two rows are one entry, with the completed update's hint.
    assert f"[output of 300000 bytes: corral output {agent_id} {blob_id}]" in logs
