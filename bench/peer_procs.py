"""Processes for the peer bench (bench/peer.py): start a server with its output in a file, read
how much CPU a process has used, find a free loopback port, say how loaded the machine is.

CPU comes from /proc: the sum of every thread's `schedstat` run time (nanoseconds), because
`stat`'s utime + stime count in clock ticks (10 ms), too coarse for a turn that costs the
server a few milliseconds. A thread that ends between two readings takes its time with it, so
`stat` is read too, and the larger of the two is used (they agree to a tick otherwise).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def stat_ns(stat_text: str) -> int:
    """utime + stime of a /proc/PID/stat line, in nanoseconds (the name may hold spaces)."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_NS


def schedstat_ns(pid: int) -> int:
    """The run time of every live thread of `pid` (nanoseconds, /proc/PID/task/*/schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue  # the thread ended while we listed them
    return total


@dataclass(frozen=True, slots=True)
class CpuReading:
    schedstat_ns: int
    stat_ns: int


def cpu_reading(pid: int) -> CpuReading:
    with open(f"/proc/{pid}/stat") as f:
        ticks = stat_ns(f.read())
    return CpuReading(schedstat_ns(pid), ticks)


def cpu_used_ns(before: CpuReading, after: CpuReading) -> int:
    """CPU between two readings: schedstat's, unless stat saw more than a tick beyond it (a
    thread that ended in between)."""
    fine = after.schedstat_ns - before.schedstat_ns
    coarse = after.stat_ns - before.stat_ns
    return coarse if coarse > fine + 2 * TICK_NS else fine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


class Server:
    """A server process in its own process group, stdout and stderr to files in `logs`."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, logs: Path) -> None:
        self.argv, self.env, self.cwd, self.logs = argv, env, cwd, logs
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        # A new output file each start: the start-up line read is this start's.
        with open(self.logs / "out", "wb") as out, open(self.logs / "err", "ab") as err:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def output(self) -> str:
        return (self.logs / "out").read_text(errors="replace")

    def wait_for_output(self, needle: str, timeout_s: float) -> str:
        """Polls the output file until it holds `needle`; the output."""
        deadline = time.monotonic() + timeout_s
        while needle not in (text := self.output()):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited: {self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.argv[0]} did not print {needle!r}: {self.tail()}")
            time.sleep(0.05)
        return text

    def tail(self) -> str:
        return (self.logs / "err").read_text(errors="replace")[-2000:]

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM (a corral daemon drains and ends its agents), then the whole group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # what the server left in its group
        self.proc.wait(10)
