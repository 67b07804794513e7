"""A real agent program as a child process speaking JSON lines on stdin/stdout, for the smoke
tests: its own process group (so closing it kills what it spawned too), stdout read line by
line into a queue, stderr kept (bounded) for failure messages, every wait under a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# Claude Code's first line carries its whole tool list and slash commands (tens of kB).
LINE_LIMIT = 16 * 1024 * 1024
STDERR_KEEP = 64 * 1024

Message = dict[str, Any]


class ChildError(AssertionError):
    pass


class Child:
    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: asyncio.Queue[Message | None] = asyncio.Queue()
        self.seen: list[Message] = []
        self._stderr = bytearray()
        self._readers = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]

    @classmethod
    async def start(
        cls, argv: Sequence[str], env: Mapping[str, str], cwd: Path, name: str = ""
    ) -> Child:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,  # its own process group: see close()
            limit=LINE_LIMIT,
        )
        return cls(proc, name or Path(argv[0]).name)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = {"__text__": line.decode(errors="replace")}
            self.seen.append(message)
            self.lines.put_nowait(message)
        self.lines.put_nowait(None)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self._stderr += raw
            del self._stderr[:-STDERR_KEEP]

    async def send(self, message: Message) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def next(self, predicate: Callable[[Message], bool], timeout_s: float = 15) -> Message:
        """The next stdout message that satisfies `predicate` (earlier ones stay in `seen`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(self.lines.get(), max(left, 0))
            except TimeoutError:
                raise ChildError(
                    f"{self.name}: no matching line in {timeout_s}s{self._tail()}"
                ) from None
            if message is None:
                raise ChildError(f"{self.name}: exited ({self.proc.returncode}){self._tail()}")
            if predicate(message):
                return message

    def _tail(self) -> str:
        last = "\n".join(json.dumps(m)[:400] for m in self.seen[-8:])
        return f"\n-- last stdout:\n{last}\n-- stderr:\n{self.stderr[-3000:]}"

    async def close(self, grace_s: float = 2.0) -> int | None:
        """Closes stdin, then SIGTERM and SIGKILL to the whole process group."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 0.5)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), grace_s)
                break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers whose leader already exited
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        return self.proc.returncode


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def tagged_processes(name: str, value: str) -> list[int]:
    """Live processes whose environment holds NAME=VALUE (zombies have none: they are gone)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def sweep(name: str, value: str) -> list[int]:
    """SIGKILLs every live process whose environment holds NAME=VALUE; returns their pids.

    Killing a program's process group is not enough: Claude Code starts each Bash command in a
    session of its own (setsid), so a command's background child outlives the group kill.
    """
    pids = tagged_processes(name, value)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids
