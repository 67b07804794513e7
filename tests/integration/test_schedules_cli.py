"""`corral schedule add | ls | pause | resume | rm` against a real daemon (in-process, its
clock a FakeClock): a schedule made, listed, fired on the clock, paused and deleted; a
malformed cron expression refused with nothing made."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def listing(addr: str, capsys: Capture) -> list[str]:
    assert cli(addr, "schedule", "ls") == 0
    return capsys.readouterr().out.splitlines()


def test_schedule_add_ls_fire_pause_resume_rm(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    assert cli(addr, "run", "--cwd", str(tmp_path), "hi") == 0
    agent_id = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.M).group(1)  # type: ignore[union-attr]
    argv = ("schedule", "add", "--agent", agent_id[:10], "--every", "2h", "--if-running", "queue")
    assert cli(addr, *argv, "/reply", "tick") == 0
    out = capsys.readouterr().out
    schedule_id = re.fullmatch(r"schedule (\S+), first at .+\n", out).group(1)  # type: ignore[union-attr]
    (line,) = [x for x in listing(addr, capsys) if x.startswith(schedule_id)]
    assert f"every 7200s  agent {agent_id}  0 runs, never run  /reply tick" in line
    grpc_server.advance(2 * 3_600_000)
    deadline = time.monotonic() + 20
    while "1 runs, last " not in line:  # the firing runs on the daemon's loop
        assert time.monotonic() < deadline
        (line,) = [x for x in listing(addr, capsys) if x.startswith(schedule_id)]
    assert "1 runs, last started" in line or "1 runs, last queued" in line
    assert cli(addr, "schedule", "pause", schedule_id[:8]) == 0
    assert capsys.readouterr().out == f"paused {schedule_id}\n"
    assert "  paused  " in next(x for x in listing(addr, capsys) if x.startswith(schedule_id))
    assert cli(addr, "schedule", "resume", schedule_id) == 0
    assert capsys.readouterr().out.startswith(f"resumed {schedule_id}, next at ")
    assert cli(addr, "schedule", "rm", schedule_id) == 0
    assert capsys.readouterr().out == f"deleted {schedule_id}\n"
    assert not [x for x in listing(addr, capsys) if x.startswith(schedule_id)]
    assert cli(addr, "schedule", "rm", schedule_id) == 2
    assert "SCHEDULE_NOT_FOUND" in capsys.readouterr().err


def test_a_malformed_cron_expression_makes_nothing(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    before = listing(addr, capsys)
    argv = ("schedule", "add", "--new", "--cwd", str(tmp_path), "--cron", "99 * * * *", "hi")
    assert cli(addr, *argv) == 2
    err = capsys.readouterr().err
    assert "INVALID_ARGUMENT" in err and "cron" in err
    assert listing(addr, capsys) == before
    assert cli(addr, "schedule", "add", "--new", "--every", "soon", "hi") == 2
    assert "--every 'soon'" in capsys.readouterr().err
