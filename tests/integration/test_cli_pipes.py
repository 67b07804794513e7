"""A closed pipe is an ordinary event: every printing command whose reader goes away early
(`corral logs ID | head -1`) ends quietly, with no traceback and exit 141 (what a shell reports
for `git log | head`), and so does the Node example. The reader here closes before the command
writes anything, so its first write is the one that meets the closed pipe."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonThread

CORRAL = [sys.executable, "-m", "corral_cli.main"]
NODE_SUBSCRIBE = Path(__file__).resolve().parents[2] / "clients" / "node" / "subscribe.js"


def into_a_closed_pipe(argv: list[str]) -> tuple[int, str]:
    """Run `argv` with stdout into a pipe nobody reads any more: (exit code, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            argv, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, check=False
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def agent(grpc_server: DaemonThread, tmp_path_factory: pytest.TempPathFactory) -> str:
    cwd = tmp_path_factory.mktemp("pipes")
    assert main(["--addr", grpc_server.address, "run", "--cwd", str(cwd), "/reply one"]) == 0
    assert main(["--addr", grpc_server.address, "--json", "ls"]) == 0  # the agent exists
    listed = subprocess.run(
        [*CORRAL, "--addr", grpc_server.address, "ls"], capture_output=True, text=True, check=True
    )
    return listed.stdout.splitlines()[-1].split()[0]


PRINTING = [
    ["ls"],
    ["--json", "ls"],
    ["logs", "{agent}", "--limit", "0"],
    ["--json", "logs", "{agent}"],
    ["logs", "-f", "--until-idle", "{agent}"],
    ["show", "{agent}"],
    ["providers"],
    ["--json", "providers"],
    ["status"],
    ["runs"],
    ["wait", "{agent}"],
    ["cancel", "{agent}"],
    ["send", "{agent}", "-f", "/reply two"],
    ["send", "{agent}", "/reply three"],
    ["run", "--cwd", "/tmp", "/reply four"],
    ["completion", "bash"],
    ["--help"],
    ["--version"],
]


@pytest.mark.parametrize("argv", PRINTING, ids=" ".join)
def test_a_printing_command_into_a_closed_pipe_ends_quietly_with_141(
    grpc_server: DaemonThread, agent: str, argv: list[str]
) -> None:
    args = [arg.replace("{agent}", agent) for arg in argv]
    if args[0] == "send":  # a turn may still run from the case before
        assert main(["--addr", grpc_server.address, "wait", agent]) == 0
    code, err = into_a_closed_pipe([*CORRAL, "--addr", grpc_server.address, *args])
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141, err


def test_logs_into_head_ends_quietly_as_git_log_does(grpc_server: DaemonThread, agent: str) -> None:
    # A real shell pipeline; `head -1` exits after one line, the rest meets a closed pipe
    # (more rows than a pipe holds, so the CLI is still writing when head exits).
    for _ in range(3):
        assert (
            main(["--addr", grpc_server.address, "send", agent, "-f", "/reply " + "x" * 30000]) == 0
        )
    script = f"{' '.join(CORRAL)} --addr {grpc_server.address} logs {agent} --limit 0 | head -1"
    done = subprocess.run(
        ["bash", "-c", f'{script}; echo "status ${{PIPESTATUS[0]}}" >&2'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert re.fullmatch(r"#1  \S+  user_message  /reply one\n", done.stdout)
    assert done.stderr == "status 141\n"


def test_the_node_subscriber_into_a_closed_pipe_ends_quietly_with_141(
    grpc_server: DaemonThread,
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH (see test_node_client.py)")
    code, err = into_a_closed_pipe([node, str(NODE_SUBSCRIBE), grpc_server.address])
    assert code == 141, err
    assert err == "READY\n"
