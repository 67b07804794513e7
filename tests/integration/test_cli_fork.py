"""`corral fork AGENT MESSAGE_ID` against a real daemon, in-process: it prints the new agent's
id, then what it holds; the fork's logs are the source's rows before the message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.test_cli_turns import cli, new_agent

Capture = pytest.CaptureFixture[str]


def test_fork_prints_the_new_agent_whose_logs_stop_before_the_message(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    source = new_agent(grpc_addr, tmp_path, capsys, "/echo\n/reply one")
    assert cli(grpc_addr, "send", "-f", source, "/echo\n/reply two") == 0
    capsys.readouterr()
    assert cli(grpc_addr, "logs", source) == 0
    logged = capsys.readouterr().out
    second = re.findall(r"\(message (\S+)\)$", logged, re.MULTILINE)[1]

    argv = ("fork", source[:10], second, "--title", "other way", "--label", "try=2")
    assert cli(grpc_addr, *argv) == 0
    fork_id, said = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"[0-9a-f]{32}", fork_id) and fork_id != source
    assert said == f"forked from {source}: 2 rows, a new session primed with the conversation"
    assert cli(grpc_addr, "logs", fork_id) == 0
    assert capsys.readouterr().out.splitlines() == logged.splitlines()[:2]

    assert cli(grpc_addr, "--json", "show", fork_id) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["title"] == "other way" and shown["labels"]["try"] == "2"
    assert shown["labels"]["corral.forked-from"].startswith(f"{source}@")


def test_fork_at_a_message_the_agent_never_had_exits_two(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    source = new_agent(grpc_addr, tmp_path, capsys, "/reply one")
    assert cli(grpc_addr, "fork", source, "no-such-message") == 2
    assert "FORK_CUT_NOT_FOUND" in capsys.readouterr().err
    assert cli(grpc_addr, "fork", source, "m", "--label", "nokey") == 2
    assert "no agent created" in capsys.readouterr().err
