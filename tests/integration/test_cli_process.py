"""The `corral` CLI as a real process: the console script end to end, Ctrl-C during a turn, and
`corral serve` starting a daemon that the CLI then reaches and SIGTERM stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonProcess, DaemonThread

CORRAL = [sys.executable, "-m", "corral_cli.main"]
# The CLI as a terminal starts it, for the Ctrl-C tests: SIGINT at its default and unblocked.
# A process inherits an ignored SIGINT (a job a non-interactive shell put in the background,
# `nohup`) and a blocked one, and Python then leaves it ignored: the test's own process may
# have been started so, and SIGINT would then never reach the CLI.
INTERACTIVE = [
    sys.executable,
    "-c",
    "import runpy, signal\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "runpy.run_module('corral_cli.main', run_name='__main__', alter_sys=True)\n",
]
ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def test_the_console_script_runs_a_prompt_piped_on_stdin(grpc_addr: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [*CORRAL, "--addr", grpc_addr, "run", "--cwd", str(tmp_path), "-"],
        input="/think first\n/reply piped\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "piped\n"
    assert done.stderr.startswith("agent ")
    assert "· thinking: first" in done.stderr


def test_ctrl_c_during_run_cancels_the_turn_and_exits_130(grpc_addr: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*INTERACTIVE, "--addr", grpc_addr, "run", "--cwd", str(tmp_path), "/sleep 600000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stderr is not None
        agent_line = proc.stderr.readline()
        started = proc.stderr.readline()  # blocks until the turn is running
        assert agent_line.startswith("agent ") and "started" in started, (agent_line, started)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "cancel: settled (agent idle)" in err
    assert out == ""


def test_corral_serve_starts_a_daemon_that_ls_reaches_and_sigterm_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = DaemonProcess(tmp_path / "state")
    daemon.args = [
        *CORRAL,
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        str(tmp_path / "state"),
    ]
    daemon.start()
    try:
        assert main(["--addr", daemon.address, "run", "--cwd", str(tmp_path), "hi"]) == 0
        capsys.readouterr()
        assert main(["--addr", daemon.address, "--json", "ls"]) == 0
        (agent,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert agent["cwd"] == str(tmp_path)
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        code, _, err = daemon.wait(timeout=60)
    finally:
        daemon.stop()
    assert code == 0, err


def test_ctrl_c_during_logs_follow_exits_130(grpc_addr: str, tmp_path: Path) -> None:
    created = subprocess.run(
        [*CORRAL, "--addr", grpc_addr, "run", "--cwd", str(tmp_path), "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    agent_id = created.stderr.split()[1]
    proc = subprocess.Popen(
        [*INTERACTIVE, "logs", agent_id, "-f", "--addr", grpc_addr],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # history is printed once the subscription is live
        assert first.startswith("#1  "), first
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err


def test_ctrl_c_during_wait_exits_130(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path
) -> None:
    created = subprocess.run(
        [*CORRAL, "--addr", grpc_addr, "run", "--cwd", str(tmp_path), "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    agent_id = created.stderr.split()[1]
    assert main(["--addr", grpc_addr, "send", agent_id, "/sleep 600000"]) == 0
    proc = subprocess.Popen(
        [*INTERACTIVE, "wait", agent_id[:8], "--for", "7.25", "--addr", grpc_addr],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        grpc_server.clock.wait_for_timer(7250)  # the daemon holds the wait
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert out == ""
    assert main(["--addr", grpc_addr, "cancel", agent_id]) == 0
