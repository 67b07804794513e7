"""`corral import PROVIDER SESSION_ID`: a new agent of an existing provider session, against a
daemon whose `importing` provider knows session "s-1" (test_import_agent.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral_cli.main import main
from corral_server.app import Config
from corral_server.clock import FakeClock
from tests.integration.test_import_agent import HISTORY, ImportingProvider
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def addr(tmp_path: Path) -> Iterator[str]:
    clock = FakeClock()
    config = Config(extra_providers={"importing": ImportingProvider(clock)})
    daemon = DaemonThread(config, clock).start()
    try:
        yield daemon.address
    finally:
        daemon.stop()


def test_import_prints_the_new_agent_with_its_session_and_rows(
    addr: str, tmp_path: Path, capsys: Capture
) -> None:
    assert main(["--addr", addr, "import", "importing", "s-1", "--cwd", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(
        rf"\S+ imported: importing session s-1, {len(HISTORY)} rows, idle\n", out
    ), out


def test_import_json_prints_the_agent(addr: str, tmp_path: Path, capsys: Capture) -> None:
    argv = ["--addr", addr, "import", "importing", "s-1", "--cwd", str(tmp_path), "--json"]
    assert main(argv) == 0
    agent = json.loads(capsys.readouterr().out)
    assert (agent["provider"], agent["provider_session_id"]) == ("importing", "s-1")
    assert agent["lifecycle"] == {"idle": {}}


def test_import_from_a_provider_that_cannot_import_exits_two_with_the_reason(
    addr: str, tmp_path: Path, capsys: Capture
) -> None:
    assert main(["--addr", addr, "import", "scripted", "s-1", "--cwd", str(tmp_path)]) == 2
    assert "cannot import" in capsys.readouterr().err
