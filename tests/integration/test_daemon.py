"""`corral serve` as a process: health, refusing a second daemon, drain on SIGTERM."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral_cli.health import health_stub
from corral_server.app import SERVICE_NAMES
from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonProcess


@pytest.fixture
def served(tmp_path: Path) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(tmp_path / "state", "--drain-delay-s", "0").start()
    yield proc
    proc.stop()


def test_health_is_serving_overall_and_per_service(served: DaemonProcess) -> None:
    with grpc.insecure_channel(served.address) as channel:
        health = health_stub(channel)
        for service in ("", "corral.v1.AgentService", "corral.v1.EventService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_second_daemon_on_the_same_port_refuses_to_start(
    served: DaemonProcess, tmp_path: Path
) -> None:
    second = DaemonProcess(tmp_path / "other-state", listen=served.address).start(
        expect_ready=False
    )
    code, _, err = second.wait()
    assert code == 2
    assert "cannot listen on" in err and served.address in err


def test_a_second_daemon_on_the_same_state_dir_refuses_to_start(served: DaemonProcess) -> None:
    second = DaemonProcess(served.state_dir).start(expect_ready=False)
    code, _, err = second.wait()
    assert code == 1
    assert "holds the state directory" in err


def test_a_non_loopback_address_needs_a_token_file(tmp_path: Path) -> None:
    proc = DaemonProcess(tmp_path / "s", listen="0.0.0.0:0").start(expect_ready=False)
    code, _, err = proc.wait()
    assert code == 2 and "not a loopback address" in err


def test_sigterm_turns_health_not_serving_while_the_port_still_answers(tmp_path: Path) -> None:
    """A balancer watching health sees NOT_SERVING and can still call the daemon during the
    drain delay; the delay is long here and a second SIGTERM ends it, so nothing is timed.
    The stream ends at the last revision it gave, and the next daemon on the same state
    directory replays exactly the events after it."""
    served = DaemonProcess(tmp_path / "state", "--drain-delay-s", "600").start()
    try:
        agent_id, ending = _drain_with_a_balancer_watching(served, tmp_path)
    finally:
        served.stop()
    again = DaemonProcess(tmp_path / "state").start()
    try:
        with grpc.insecure_channel(again.address) as channel:
            request = event_pb.SubscribeRequest(
                agent_ids=[agent_id],
                resume_revision=ending.resume_revision,
                resume_incarnation=ending.incarnation,
            )
            replayed, synced = _until_synced(Stubs.of(channel).events.Subscribe(request))
        assert not synced.reset and synced.incarnation == ending.incarnation
        # No gap and no duplicate: every revision after the resume point, once, in order
        # (every event of this state directory is this agent's).
        first = ending.resume_revision + 1
        assert [e.revision for e in replayed] == list(range(first, synced.revision + 1))
    finally:
        again.stop()


def _until_synced(
    stream: Iterator[event_pb.SubscribeResponse],
) -> tuple[list[event_pb.Event], event_pb.Synced]:
    """The stream's events before its first Synced, and that Synced."""
    seen: list[event_pb.Event] = []
    for response in stream:
        for event in response.events:
            if event.HasField("synced"):
                return seen, event.synced
            seen.append(event)
    raise AssertionError(f"the stream ended before synced: {seen}")


def _drain_with_a_balancer_watching(
    served: DaemonProcess, tmp_path: Path
) -> tuple[str, event_pb.StreamEnding]:
    assert served.proc is not None
    with grpc.insecure_channel(served.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent.id
        health = health_stub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
        assert next(health).status == health_pb2.HealthCheckResponse.SERVING
        stream = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
        # The snapshot already holds the agent; the create's own events are published once
        # the event log commits them, which may be after the drain (then resume_revision 0).
        snapshot, synced = _until_synced(stream)
        assert [e.agent_upserted.agent.id for e in snapshot] == [agent_id]
        served.proc.send_signal(signal.SIGTERM)
        assert next(health).status == health_pb2.HealthCheckResponse.NOT_SERVING
        # The delay: the port is open and every service answers, health says NOT_SERVING.
        checker = health_stub(channel)
        for service in ("", *SERVICE_NAMES):
            reply = checker.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        listed = stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=10)
        assert [a.id for a in listed.agents] == [agent_id]
        assert served.proc.poll() is None
        served.proc.send_signal(signal.SIGTERM)  # a second signal ends the delay
        rest = [e for response in stream for e in response.events]
        assert stream.code() == grpc.StatusCode.OK
    *live, last = rest
    assert last.WhichOneof("payload") == "stream_ending"
    ending = last.stream_ending
    # It resumes right after the last event the stream gave (live events follow the head
    # the snapshot was taken at, without a gap).
    given = [e.revision for e in live]
    assert given == list(range(synced.revision + 1, ending.resume_revision + 1))
    assert ending.incarnation == synced.incarnation != ""
    code, _, err = served.wait()
    assert code == 0, err
    return agent_id, ending


def test_a_request_over_the_configured_size_is_resource_exhausted(tmp_path: Path) -> None:
    from corral_server.app import Config
    from tests.support.daemon import running_daemon

    with (
        running_daemon(Config(max_request_bytes=64 * 1024)) as daemon,
        grpc.insecure_channel(daemon.address) as channel,
    ):
        stubs = Stubs.of(channel)
        with pytest.raises(grpc.RpcError) as info:
            stubs.agents.CreateAgent(create_request(str(tmp_path), title="x" * 100_000))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "64" in (info.value.details() or "") or "larger than max" in (
            info.value.details() or ""
        )
        listed = stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
        assert list(listed.agents) == []


def test_sigterm_ends_a_followed_turn_with_shutting_down(
    served: DaemonProcess, tmp_path: Path
) -> None:
    from corral.v1 import turn_service_pb2 as turn_pb
    from tests.support.client import text

    with grpc.insecure_channel(served.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent.id
        turn = stubs.turns.StreamTurn(
            turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("/sleep 600000"))
        )
        assert next(turn).WhichOneof("event") == "turn_started"
        assert served.proc is not None
        served.proc.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.RpcError) as info:
            list(turn)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in (info.value.details() or "")
    code, _, err = served.wait()
    assert code == 0, err


def test_json_logs_are_one_object_per_line(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "state", "--log-format", "json").start()
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    code, _, err = daemon.wait(30)
    assert code == 0
    records = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert records and {"time", "level", "logger", "message"} <= set(records[0])
    assert any("draining" in r["message"] for r in records)
