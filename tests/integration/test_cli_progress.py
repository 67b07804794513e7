"""Progress while waiting: a wait over a second shows, on a terminal's stderr only, what it waits
for and how long it may take, then erases itself. The CLI runs as a process whose stderr is a
pseudo-terminal; the daemon runs on a FakeClock, so each wait lasts until the test moves it."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral_cli import progress
from corral_cli.main import main
from corral_cli.render import Console
from corral_server.app import Config
from tests.support.daemon import DaemonThread
from tests.support.fakes import FakeProvider

CORRAL = [sys.executable, "-m", "corral_cli.main"]
DEADLINE_S = 30.0


class OnTerminal:
    """The CLI with stderr on a pseudo-terminal; stdout a pipe."""

    def __init__(self, addr: str, *argv: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [*CORRAL, "--addr", addr, *argv],
            stdout=subprocess.PIPE,
            stderr=slave,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        os.close(slave)
        self.seen = ""

    def read_until(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + DEADLINE_S
        while (found := re.search(pattern, self.seen)) is None:
            assert time.monotonic() < deadline, f"no {pattern!r} in {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                self.read_some()
        return found

    def read_some(self) -> None:
        with contextlib.suppress(OSError):  # the process has gone: nothing more to read
            self.seen += os.read(self.master, 4096).decode(errors="replace")

    def finish(self, daemon: DaemonThread, step_ms: int) -> tuple[int, str]:
        """Move the daemon's clock until the CLI exits: its code and stdout."""
        deadline = time.monotonic() + DEADLINE_S
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, self.seen
            daemon.advance(step_ms)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(0.05)
        self.read_some()
        os.close(self.master)
        assert self.proc.stdout is not None
        with self.proc.stdout:
            return self.proc.returncode, self.proc.stdout.read()


@pytest.fixture
def agent(grpc_server: DaemonThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["--addr", grpc_server.address, "run", "--cwd", str(tmp_path), "hi"]) == 0
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_a_refused_cancel_shows_the_settle_wait_then_erases_it(
    grpc_server: DaemonThread, agent: str
) -> None:
    addr = grpc_server.address
    assert (
        main(["--addr", addr, "send", agent, "/refuse-interrupt\n/sleep 600000\n/reply end"]) == 0
    )
    cli = OnTerminal(addr, "cancel", agent)
    cli.read_until(
        rf"⏳ waiting for agent {agent}'s turn to stop "
        r"\(the daemon's settle wait, 10 s by default\): \d+ s"
    )
    code, out = cli.finish(grpc_server, 1000)
    assert code == 3 and out.startswith("refused (agent running turn-")
    assert cli.seen.endswith("\r\x1b[K")  # the line is gone before the answer
    grpc_server.advance(600_000)
    assert main(["--addr", addr, "wait", agent]) == 0


def test_wait_without_for_shows_what_it_waits_for_and_that_it_has_no_limit(
    grpc_server: DaemonThread, agent: str
) -> None:
    assert main(["--addr", grpc_server.address, "send", agent, "/sleep 5000"]) == 0
    cli = OnTerminal(grpc_server.address, "wait", agent)
    cli.read_until(
        rf"⏳ waiting for agent {agent} to be idle \(no time limit; Ctrl-C stops waiting\): 1 s"
    )
    code, out = cli.finish(grpc_server, 1000)
    assert (code, out) == (0, "idle\n")
    assert cli.seen.endswith("\r\x1b[K")


def test_spawn_wait_on_a_failing_child_shows_the_error_grace(
    grpc_server: DaemonThread, agent: str
) -> None:
    cli = OnTerminal(grpc_server.address, "spawn", agent, "/fail broken", "--wait")
    found = cli.read_until(
        r"⏳ waiting for run (\S+) to end \(no run timeout; a failed child ends it after the "
        r"daemon's error grace, 15 s by default\)"
    )
    code, out = cli.finish(grpc_server, 1000)
    assert code == 1 and out == "broken\n", cli.seen  # the failed child's error as result
    assert f"run {found.group(1)} ended: error" in cli.seen


def test_a_create_whose_session_is_slow_to_start_says_so(tmp_path: Path) -> None:
    provider = FakeProvider("slow")
    gate = provider.hold_create()
    daemon = DaemonThread(Config(extra_providers={"slow": provider})).start()
    try:
        cli = OnTerminal(daemon.address, "run", "--provider", "slow", "--cwd", str(tmp_path), "hi")
        try:
            cli.read_until(r"⏳ waiting for the slow session to start \(up to 60 s\): 1 s")
        finally:
            daemon.loop.call_soon_threadsafe(gate.set)
            cli.proc.kill()  # the fake turn never ends by itself
            cli.finish(daemon, 0)
    finally:
        daemon.stop()


# --- nothing of it off a terminal, or with --json -------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def at_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    yield


def shown(console: Console) -> str:
    err = console.err
    assert isinstance(err, io.StringIO)
    with progress.waiting(console, "x", "y"):
        deadline = time.monotonic() + DEADLINE_S
        # On a terminal the line comes at once (SHOW_AFTER_S = 0); elsewhere never.
        while err.isatty() and not console.json and "⏳" not in err.getvalue():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    return err.getvalue()


def test_the_line_shows_on_a_terminal(at_once: None) -> None:
    assert shown(Console(err=FakeTerminal())).startswith("\r\x1b[K⏳ waiting for x (y): ")


def test_nothing_shows_with_json_or_off_a_terminal(at_once: None) -> None:
    assert shown(Console(json=True, err=FakeTerminal())) == ""
    assert shown(Console(err=io.StringIO())) == ""
