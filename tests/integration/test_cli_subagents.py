"""`corral spawn`, `corral runs` and `corral kill-run` in-process against a real daemon: what
they print and their exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corral_cli.main import main

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def new_agent(addr: str, cwd: Path, capsys: Capture) -> str:
    assert cli(addr, "run", "--cwd", str(cwd), "hi") == 0
    match = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1)


def spawned(addr: str, capsys: Capture, *argv: str) -> tuple[str, str]:
    """`corral spawn ...` without --wait: the run id and the child id it reports."""
    assert cli(addr, "spawn", *argv) == 0
    match = re.search(r"^run (\S+) child (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1), match.group(2)


def json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_spawn_wait_prints_the_childs_result(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    root = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "spawn", root[:8], "hello", "child", "--wait", "--label", "greeter") == 0
    out, err = capsys.readouterr()
    assert out == "You said: hello child\n"
    assert re.search(r"^run \S+ ended: ok \(complete\)$", err, re.MULTILINE)


def test_spawn_wait_json_prints_the_spawned_run_then_the_ended_run(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    root = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "spawn", root, "/reply partial", "--wait", "--json") == 0
    spawned_run, ended = json_lines(capsys.readouterr().out)
    assert spawned_run["run_id"] == ended["run_id"] and ended["outcome"] == "SUBAGENT_OUTCOME_OK"
    assert ended["result_text"] == "partial"


def test_runs_lists_a_tree_and_kill_run_cascades(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    root = new_agent(grpc_addr, tmp_path, capsys)
    run, child = spawned(grpc_addr, capsys, root, "/sleep 600000", "--label", "worker")
    grand_run, _ = spawned(grpc_addr, capsys, child, "/sleep 600000")
    assert cli(grpc_addr, "runs", root) == 0
    out, err = capsys.readouterr()
    header, *rows = out.splitlines()
    assert header.split() == ["RUN", "CHILD", "REQUESTER", "STATE", "ANNOUNCE", "CREATED", "TASK"]
    assert rows[0].split()[:4] == [run, child, root, "running"]  # ids whole
    assert len(rows) == 1 and rows[0].endswith("worker")
    assert err == (
        f"runs below {root}: 2 not ended, 2 not done (not ended, or not yet announced)\n"
    )
    assert cli(grpc_addr, "runs", root, "--descendants", "--json") == 0
    listed = json_lines(capsys.readouterr().out)
    assert [r["run_id"] for r in listed] == [run, grand_run]
    assert cli(grpc_addr, "kill-run", run[:10], "--cascade") == 0
    assert capsys.readouterr().out.split() == [run, grand_run]
    assert cli(grpc_addr, "runs", root, "--descendants", "--active", "--json") == 0
    assert capsys.readouterr().out == ""
    assert cli(grpc_addr, "kill-run", run) == 0  # ended already: nothing to kill
    assert capsys.readouterr().err == f"run {run} had ended already\n"


def test_kill_run_of_an_unknown_run_is_a_bad_request(grpc_addr: str, capsys: Capture) -> None:
    assert cli(grpc_addr, "kill-run", "no-such-run") == 2
    assert "SUBAGENT_RUN_NOT_FOUND" in capsys.readouterr().err
