"""`corral usage` against a real daemon, in-process: the total, a table grouped by what --by
names with its total line, --json answers, an agent's own total in `show`, and a bad --by as
a usage error."""

from __future__ import annotations

import json
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
    daemon = DaemonThread(Config(state_dir=tmp_path / "state")).start()
    yield daemon
    daemon.stop()


def test_usage_prints_totals_grouped_as_asked(
    durable: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = durable.address
    assert cli(addr, "run", "--cwd", str(tmp_path), "/reply one two three") == 0
    assert cli(addr, "run", "--cwd", str(tmp_path), "/reply four") == 0
    found = re.findall(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert len(found) == 2
    assert cli(addr, "show", found[1]) == 0
    assert "all turns: 0 in, 1 out, 0 cached, $0.0000" in capsys.readouterr().out

    assert cli(addr, "usage") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["turns", "input", "output", "cached", "cost_usd"]
    assert lines[1].split() == ["2", "0", "4", "0", "0.0000"]

    assert cli(addr, "usage", "--by", "model,provider") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["provider", "model"]
    assert lines[1].split() == ["scripted", "scripted-1", "2", "0", "4", "0", "0.0000"]
    assert lines[2].split()[0] == "total" and lines[2].split()[-4:] == ["0", "4", "0", "0.0000"]

    assert cli(addr, "--json", "usage", "--by", "agent") == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(answers) == 1 and len(answers[0]["groups"]) == 2
    assert answers[0]["total"]["output_tokens"] == "4"

    assert cli(addr, "usage", "--by", "week") == 2
    assert "--by" in capsys.readouterr().err
