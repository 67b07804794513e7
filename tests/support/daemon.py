"""A real corral daemon for tests: in a background thread of this process (with a FakeClock
the test can advance), or as a `corral serve` subprocess (for signals and the CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import grpc

from corral_server.app import Config, Daemon
from corral_server.clock import FakeClock
from tests.support.client import Stubs

T = TypeVar("T")


class DaemonThread:
    """Runs `Daemon` on its own event loop in a thread, listening on 127.0.0.1:<free port>."""

    def __init__(self, config: Config, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.config = replace(config, listen="127.0.0.1:0")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="corral-daemon", daemon=True
        )
        self.daemon: Daemon | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> DaemonThread:
        self._thread.start()

        async def boot() -> int:
            self.daemon = Daemon(self.config, clock=self.clock)
            return await self.daemon.start()

        self.port = self.run(boot())
        return self

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the daemon's loop and wait for its result."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def advance(self, ms: int) -> None:
        """Move the daemon's clock forward, firing due timers and sleeps."""
        self.run(self.clock.advance(ms))

    async def advance_async(self, ms: int) -> None:
        await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self.clock.advance(ms), self.loop)
        )

    def stop(self) -> None:
        if self.daemon is not None:
            with contextlib.suppress(Exception):
                self.run(self.daemon.drain(grace_s=3.0, delay_s=0))
        # Close what async generators (Subscribe's handlers) the loop still holds while it
        # runs: one collected after the loop closed warns that its aclose was never awaited.
        with contextlib.suppress(Exception):
            self.run(self.loop.shutdown_asyncgens())
        # Then cancel and await what tasks are left, as asyncio.run does (a NATS client's
        # flusher, say, cancelled by its close but not yet run): a task destroyed with the
        # closed loop raises in whatever test the collector happens to run in.
        with contextlib.suppress(Exception):
            self.run(_cancel_the_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def _cancel_the_rest() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def running_daemon(config: Config | None = None) -> Iterator[DaemonThread]:
    thread = DaemonThread(config or Config()).start()
    try:
        yield thread
    finally:
        thread.stop()


@contextlib.asynccontextmanager
async def serving_stubs(config: Config) -> AsyncIterator[Stubs]:
    """Async stubs on a DaemonThread running `config`, stopped after."""
    daemon = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


class DaemonProcess:
    """`corral serve` as a subprocess on a free loopback port."""

    # The start-up line (corral_server/startup_line.py): the gRPC address follows "listening on".
    LISTENING = re.compile(r"^corral \S+ \(API \S+\) listening on ([^\s,;]+):(\d+)[,;]")
    UNIX_LISTENING = re.compile(r"^corral \S+ \(API \S+\) listening on (unix:[^\s,;]+)")

    def __init__(self, state_dir: Path, *extra: str, listen: str = "127.0.0.1:0") -> None:
        self.state_dir = state_dir
        self.args = [
            sys.executable,
            "-m",
            "corral_server.daemon",
            "--listen",
            listen,
            "--state-dir",
            str(state_dir),
            *extra,
        ]
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self.first_line = ""

    def start(self, expect_ready: bool = True, timeout: float = 30) -> DaemonProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        if expect_ready:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()  # blocks until the daemon prints or exits
            self.first_line = line
            match = self.LISTENING.search(line)
            unix = self.UNIX_LISTENING.search(line)
            if unix is not None:
                self.address = unix.group(1)
            elif match is not None:
                self.address = f"127.0.0.1:{match.group(2)}"
            else:
                self.proc.kill()
                _, err = self.proc.communicate(timeout=timeout)
                raise RuntimeError(f"daemon did not start: {line!r} {err}")
        return self

    def wait_for_log(self, text: str) -> str:
        """Read the daemon's stderr until a line containing `text` (e.g. after a signal); the
        line. Fails if the daemon exits first (pytest-timeout bounds a daemon that hangs)."""
        assert self.proc is not None and self.proc.stderr is not None
        seen: list[str] = []
        for line in self.proc.stderr:
            if text in line:
                return line
            seen.append(line)
        raise AssertionError(f"the daemon ended without logging {text!r}: {''.join(seen)}")

    def wait(self, timeout: float = 30) -> tuple[int, str, str]:
        assert self.proc is not None
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def drained(self, timeout: float = 30) -> None:
        """SIGTERM, and the drain ends the daemon with exit code 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code, _, err = self.wait(timeout=timeout)
        self.stop()
        assert code == 0, err

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=10)
