"""`corral queued AGENT [PROMPT_ID]` against a real daemon, in-process: the queue's summaries,
one line each, and one queued prompt printed in full."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def test_queued_lists_summaries_and_prints_one_prompt_whole(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    assert cli(addr, "run", "--cwd", str(tmp_path), "hi") == 0
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    agent_id = found.group(1)
    assert cli(addr, "queued", agent_id) == 0
    assert capsys.readouterr().err == "nothing queued\n"

    assert cli(addr, "send", agent_id, "/sleep 9307") == 0
    grpc_server.clock.wait_for_timer(9307)
    long = "/reply long\n" + "word " * 2_000
    assert cli(addr, "send", agent_id, "--queue", long) == 0
    long_id = capsys.readouterr().out.split()[-1]
    assert cli(addr, "send", agent_id, "--queue", "/reply short") == 0
    short_id = capsys.readouterr().out.split()[-1]

    assert cli(addr, "queued", agent_id[:10]) == 0
    listed = capsys.readouterr()
    lines = listed.out.splitlines()
    assert [line.split("  ")[0] for line in lines] == [long_id, short_id]
    assert lines[0].endswith(f"client  {len(long)} chars  /reply long ↵ word word word word word …")
    assert lines[1].endswith("client  12 chars  /reply short")
    assert f"corral queued {agent_id} PROMPT_ID" in listed.err

    assert cli(addr, "queued", agent_id, long_id) == 0
    assert capsys.readouterr().out == long + "\n"
    assert cli(addr, "--json", "queued", agent_id, long_id) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["content"] == [{"text": long}] and whole["text_bytes"] == str(len(long))

    assert cli(addr, "queued", agent_id, "not-queued") == 2  # NOT_FOUND
    assert "QUEUED_PROMPT_NOT_FOUND" in capsys.readouterr().err
