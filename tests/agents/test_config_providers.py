"""A real ACP agent configured in a providers file: `corral serve --config FILE` as a process, with
a `[providers.NAME]` entry of kind acp running the pinned gemini-cli against the fake Gemini
API, runs a text turn through the wire; the daemon's drain leaves no agent process behind."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.agents import programs
from tests.agents.child import sweep, tagged_processes
from tests.agents.conftest import LEFTOVER_GRACE_S, Place
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonProcess
from tests.support.fake_models import FakeModelServer


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def providers_file(name: str, program: programs.Program) -> str:
    command = ", ".join(toml_string(arg) for arg in program.argv)
    env = ", ".join(f"{key} = {toml_string(value)}" for key, value in program.env.items())
    return f'[providers.{name}]\nkind = "acp"\ncommand = [{command}]\nenv = {{ {env} }}\n'


@pytest.fixture
def gemini(fake: FakeModelServer, place: Place) -> Iterator[programs.Program]:
    program = programs.gemini(place.home, place.cwd, fake.url)
    assert programs.installed("gemini"), "gemini is not installed: run buildscripts/test"
    try:
        yield program
    finally:
        sweep(programs.LEFTOVER_TAG, program.tag)


@pytest.fixture
def served(tmp_path: Path, gemini: programs.Program) -> Iterator[DaemonProcess]:
    config = tmp_path / "corral.toml"
    config.write_text(providers_file("my-gemini", gemini))
    state = tmp_path / "state"
    daemon = DaemonProcess(state)
    daemon.args = [sys.executable, "-m", "corral_cli.main", "serve", "--listen", "127.0.0.1:0"]
    daemon.args += ["--state-dir", str(state), "--drain-delay-s", "0", "--config", str(config)]
    daemon.start()
    try:
        yield daemon
    finally:
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)  # the drain closes the agent's session
        code, _, err = daemon.wait(timeout=60)
        daemon.stop()
        assert code == 0, err
        no_process_left(gemini.tag)


def no_process_left(tag: str) -> None:
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while pids := tagged_processes(programs.LEFTOVER_TAG, tag):
        assert time.monotonic() < deadline, f"processes left behind: {pids}"
        time.sleep(0.05)  # polling the process table, not timing the test


def test_a_config_defined_acp_provider_runs_a_real_agents_text_turn(
    served: DaemonProcess, place: Place, gemini: programs.Program
) -> None:
    with grpc.insecure_channel(served.address) as channel:
        stubs = Stubs.of(channel)
        listed = stubs.agents.ListProviders(agent_pb.ListProvidersRequest(), timeout=30)
        mine = next(p for p in listed.providers if p.name == "my-gemini")
        assert (mine.kind, mine.available) == ("acp", True)

        created = stubs.agents.CreateAgent(
            create_request(str(place.cwd), provider="my-gemini"), timeout=120
        )
        assert tagged_processes(programs.LEFTOVER_TAG, gemini.tag)  # the agent runs
        prompt = text("Hi [[reply: hello from the providers file]]")
        events = list(
            stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=created.agent.id, content=prompt), timeout=120
            )
        )
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_completed"
    # One message may come as several rows when its fragments arrive further apart than the
    # coalescing window (a loaded machine): the message is their join.
    said = "".join(e.row.item.assistant_message.text for e in events if e.HasField("row"))
    assert said == "hello from the providers file"
