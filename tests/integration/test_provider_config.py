"""`corral serve --config FILE` as a real process: the providers file's entries and the built-in
ones through ListProviders, CreateAgent on an unavailable or config-defined provider, the
`corral providers` command, and a bad file stopping the start with exit code 2.

The daemon's PATH is a temporary directory holding only a stand-in `gemini`, so which built-in
is available does not depend on what this machine has installed.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli.main import main
from tests.support.client import Stubs, SyncStubs, create_request, error_details, text
from tests.support.daemon import DaemonProcess

SERVE = [sys.executable, "-m", "corral_cli.main", "serve"]

CONFIG = """\
[providers.my-acp]
kind = "acp"
command = ["{agent}", "--acp"]
env = {{ MY_AGENT_KEY = "k" }}

[providers.missing]
kind = "acp"
command = ["no-such-agent", "--acp"]

[providers.demo]
kind = "scripted"
steer = true
"""


def serve(tmp_path: Path, *flags: str) -> DaemonProcess:
    daemon = DaemonProcess(tmp_path / "state")
    daemon.args = [*SERVE, "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state")]
    daemon.args += ["--drain-delay-s", "0", *flags]
    return daemon


def stand_in(directory: Path, name: str) -> Path:
    """An executable file `name` (never run: availability only looks it up on PATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    tmp_path = tmp_path_factory.mktemp("config")
    path_dir = tmp_path / "bin"
    stand_in(path_dir, "gemini")
    agent = stand_in(tmp_path / "elsewhere", "my-agent")
    config = tmp_path / "corral.toml"
    config.write_text(CONFIG.format(agent=agent))
    daemon = serve(tmp_path, "--config", str(config))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(path_dir))  # the daemon's; its own argv is absolute
        daemon.start()
    try:
        yield daemon
    finally:
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        code, _, err = daemon.wait(timeout=60)
        daemon.stop()
        assert code == 0, err


@pytest.fixture(scope="module")
def stubs(served: DaemonProcess) -> Iterator[SyncStubs]:
    with grpc.insecure_channel(served.address) as channel:
        yield Stubs.of(channel)


def listed(stubs: SyncStubs) -> dict[str, agent_pb.Provider]:
    reply = stubs.agents.ListProviders(agent_pb.ListProvidersRequest(), timeout=30)
    return {p.name: p for p in reply.providers}


def test_list_providers_gives_scripted_the_builtins_then_the_files_entries(
    stubs: SyncStubs,
) -> None:
    assert list(listed(stubs)) == [
        "scripted",
        "claude-code",
        "codex",
        "gemini",
        "claude-acp",
        "my-acp",
        "missing",
        "demo",
    ]


def test_list_providers_says_which_providers_take_steered_prompts(stubs: SyncStubs) -> None:
    steers = {name: provider.can_steer for name, provider in listed(stubs).items()}
    # codex steers (turn/steer) whether or not it is installed; a scripted entry with
    # `steer = true` does, the built-in scripted does not, nor do ACP agents or Claude Code.
    assert {name for name, steer in steers.items() if steer} == {"codex", "demo"}


def test_a_config_defined_acp_provider_is_listed_available(stubs: SyncStubs) -> None:
    mine = listed(stubs)["my-acp"]
    assert (mine.kind, mine.available, mine.unavailable_reason) == ("acp", True, "")


def test_a_provider_whose_command_is_missing_is_listed_unavailable_with_the_reason(
    stubs: SyncStubs,
) -> None:
    missing = listed(stubs)["missing"]
    assert (missing.kind, missing.available) == ("acp", False)
    assert missing.unavailable_reason == "no-such-agent not found"


def test_builtins_are_available_exactly_when_their_program_is_on_path(stubs: SyncStubs) -> None:
    providers = listed(stubs)
    gemini, claude_acp = providers["gemini"], providers["claude-acp"]
    assert (gemini.kind, gemini.available, gemini.unavailable_reason) == ("acp", True, "")
    assert (claude_acp.kind, claude_acp.available) == ("acp", False)
    assert claude_acp.unavailable_reason == "claude-agent-acp not found"
    for name in ("claude-code", "codex"):  # `claude` and `codex` are not on this PATH
        builtin = providers[name]
        assert (builtin.kind, builtin.available) == (name, False)
        assert builtin.unavailable_reason  # not found, or (before its adapter) not in the build


def test_scripted_providers_list_every_field_of_their_modes_and_models(stubs: SyncStubs) -> None:
    for name in ("scripted", "demo"):
        provider = listed(stubs)[name]
        assert provider.available
        assert [(m.id, m.label) for m in provider.modes] == [
            ("default", "Default"),
            ("plan", "Plan"),
        ]
        assert provider.modes[0].description == "Runs the prompt's directives."
        assert [(m.id, m.label) for m in provider.models] == [("scripted-1", "Scripted 1")]


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(cast(grpc.Call, error))  # a sync call's error is the call
    assert status is not None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError("no ErrorInfo")


def test_create_agent_on_an_unavailable_provider_is_failed_precondition_with_the_reason(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        stubs.agents.CreateAgent(create_request(str(tmp_path), provider="missing"), timeout=30)
    details = error_details(raised.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION
    assert details.reason == "PROVIDER_UNAVAILABLE"
    assert details.message == "provider 'missing' is unavailable: no-such-agent not found"
    assert dict(error_info(raised.value).metadata) == {
        "provider": "missing",
        "unavailable_reason": "no-such-agent not found",
    }
    reply = stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=30)
    assert all(a.provider != "missing" for a in reply.agents)  # nothing was created


def test_create_agent_on_an_unknown_provider_still_names_the_known_ones(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        stubs.agents.CreateAgent(create_request(str(tmp_path), provider="nope"), timeout=30)
    details = error_details(raised.value)
    assert (details.code, details.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_PROVIDER")
    assert "demo" in details.message and "my-acp" in details.message


def test_a_config_defined_scripted_provider_under_another_name_creates_agents(
    stubs: SyncStubs, tmp_path: Path
) -> None:
    agent = stubs.agents.CreateAgent(create_request(str(tmp_path), provider="demo"), timeout=30)
    assert agent.agent.provider == "demo"
    events = list(
        stubs.turns.StreamTurn(
            turn_pb.StreamTurnRequest(agent_id=agent.agent.id, content=text("/reply from demo")),
            timeout=60,
        )
    )
    assert events[-1].WhichOneof("event") == "turn_completed"
    said = [e.row.item.assistant_message.text for e in events if e.HasField("row")]
    assert said[-1] == "from demo"


def test_corral_providers_shows_availability_and_the_reason(
    served: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--addr", served.address, "providers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "AVAILABLE", "MODES", "MODELS", "STEER"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    missing = ["missing", "acp", "no:", "no-such-agent", "not", "found", "-", "-", "no"]
    assert rows["missing"] == missing
    assert rows["my-acp"] == ["my-acp", "acp", "yes", "-", "-", "no"]
    assert rows["demo"][2:] == ["yes", "default,plan", "scripted-1", "yes"]
    assert rows["codex"][-1] == "yes"


def test_corral_providers_json_gives_one_object_per_provider(
    served: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--addr", served.address, "--json", "providers"]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    missing = next(o for o in objects if o["name"] == "missing")
    assert missing == {
        "name": "missing",
        "kind": "acp",
        "unavailable_reason": "no-such-agent not found",
    }


def test_corral_run_on_an_unavailable_provider_says_why_and_exits_2(
    served: DaemonProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--addr", served.address, "run", "--provider", "missing", "--cwd", str(tmp_path)]
    assert main([*argv, "hi"]) == 2
    err = capsys.readouterr().err
    assert "FAILED_PRECONDITION: provider 'missing' is unavailable: no-such-agent not found" in err
    assert "reason: PROVIDER_UNAVAILABLE" in err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read the providers file: No such file or directory"),
        ("[providers.x\n", "not valid TOML: "),
        ('[providers.x]\nkind = "openai"\n', "[providers.x]: unknown kind 'openai'"),
        (
            '[providers.x]\nkind = "acp"\ncommand = "x --acp"\n',
            "[providers.x]: 'command' must be a non-empty",
        ),
        (
            '[providers.x]\nkind = "acp"\ncommand = ["x"]\nargs = []\n',
            "[providers.x]: unknown key 'args'",
        ),
    ],
)
def test_a_bad_providers_file_stops_the_start_with_one_line_and_exit_2(
    tmp_path: Path, content: str | None, says: str
) -> None:
    config = tmp_path / "corral.toml"
    if content is not None:
        config.write_text(content)
    daemon = serve(tmp_path, "--config", str(config)).start(expect_ready=False)
    try:
        code, out, err = daemon.wait(timeout=60)
    finally:
        daemon.stop()
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert f" ERROR corral: cannot start: {config}: {says}" in line
    assert "Traceback" not in err
    assert not (tmp_path / "state").exists()  # refused before the state directory is touched


def test_without_a_config_file_the_builtins_are_listed(tmp_path: Path) -> None:
    daemon = serve(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", os.devnull)
        daemon.start()
    try:
        with grpc.insecure_channel(daemon.address) as channel:
            names = list(listed(Stubs.of(channel)))
    finally:
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        daemon.stop()
    assert names == ["scripted", "claude-code", "codex", "gemini", "claude-acp"]
