"""`corral logs --projected` (and `-f`) against a real daemon: one line per entry, its source
ranges in front (docs/design.md#projections)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.integration.test_projections import SCRIPT
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str, out: object = None) -> int:
    return main(["--addr", addr, *argv], out=out)  # type: ignore[arg-type]


def fields(line: str) -> list[str]:
    """A log line without its time: `#RANGES`, kind, text."""
    ranges, _when, *rest = line.split("  ")
    return [ranges, *rest]


def follow(grpc_server: DaemonThread, argv: list[str]) -> tuple[list[int], list[str]]:
    """Runs `corral logs ... -f --until-idle` in a thread into a pipe while moving the
    daemon's clock; its exit codes and lines."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as reader, os.fdopen(write_fd, "w") as writer:
        codes: list[int] = []
        thread = threading.Thread(
            target=lambda: codes.append(cli(grpc_server.address, *argv, out=writer))
        )
        thread.start()
        first = reader.readline()  # the history: the subscription is live from here
        while thread.is_alive():
            grpc_server.advance(100)  # a no-op until the provider sleeps
            thread.join(0.05)
        writer.close()
        return codes, [first, *reader.read().splitlines()]


def new_agent(addr: str, cwd: Path, capsys: Capture) -> str:
    assert cli(addr, "run", "--cwd", str(cwd), "hi") == 0
    match = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_logs_projected_prints_entries_live_and_again_as_rows_change_them(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    agent_id = new_agent(addr, tmp_path, capsys)  # rows 1, 2: "hi" and its reply
    assert cli(addr, "send", agent_id, "\n".join(SCRIPT)) == 0
    capsys.readouterr()
    codes, lines = follow(grpc_server, ["logs", agent_id, "--projected", "-f", "--until-idle"])
    assert codes == [0]
    assert [fields(line)[:2] for line in lines[:2]] == [
        ["#1", "user_message"],
        ["#2", "assistant_message"],
    ]
    live = [fields(line) for line in lines[2:]]  # the script's rows follow at seq 3
    # Each entry once when it begins, and again when a later row folds into it.
    assert [f[0] for f in live] == ["#3", "#4", "#5", "#5-6", "#4,7", "#8"]
    assert live[4][1:] == ["tool_call", "read completed"]
    assert live[3][1:] == ["assistant_message", "one.two"]
    # Printed once, afterwards: the folded entries, each once.
    assert cli(addr, "logs", agent_id, "--projected") == 0
    out = capsys.readouterr().out.splitlines()
    assert [fields(line)[0] for line in out] == ["#1", "#2", "#3", "#4,7", "#5-6", "#8"]
