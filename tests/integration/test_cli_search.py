"""`corral search QUERY` against a real daemon with a state directory, in-process: each hit
with its snippet and the `corral logs` command that opens it (which does show the row), a
malformed query as a usage error naming the query, and an in-memory daemon's refusal."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral_cli.main import main
from corral_server.app import Config
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(state_dir=tmp_path / "state", search_index=True)).start()
    yield daemon
    daemon.stop()


def test_search_prints_hits_and_the_logs_command_that_opens_each(
    durable: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = durable.address
    assert cli(addr, "run", "--cwd", str(tmp_path), "/reply the capybara naps") == 0
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    agent_id = found.group(1)
    assert cli(addr, "run", "--cwd", str(tmp_path), "unrelated words") == 0
    capsys.readouterr()
    assert cli(addr, "search", "capybara", "--kind", "assistant_message") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert f"{agent_id[:12]}  #2 assistant_message" in out[0]
    assert out[1].strip() == "the «capybara» naps"
    command = out[2].strip()
    assert command.startswith(f"corral logs {agent_id} --limit ")
    assert cli(addr, *command.split()[1:]) == 0
    assert "the capybara naps" in capsys.readouterr().out

    assert cli(addr, "search", "nothingsimilar") == 0
    assert "no hits" in capsys.readouterr().err
    assert cli(addr, "search", "capybara AND") == 2
    assert "query" in capsys.readouterr().err


def test_search_on_an_in_memory_daemon_names_the_state_dir(
    grpc_server: DaemonThread, capsys: Capture
) -> None:
    assert cli(grpc_server.address, "search", "anything") != 0
    assert "--state-dir" in capsys.readouterr().err
