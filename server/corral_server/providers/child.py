"""One agent child process, the plumbing the three adapters share (acp_wire.py, codex_wire.py,
claude_code_wire.py): spawning it, its bounded stderr tail, its stdout lines, writing a JSON
line, the tasks that live as long as it does, the table of requests waiting for an answer, and
stopping it with whatever it spawned.

The child runs in its own process group, so closing it stops whatever it spawned, and carries
an environment tag that finds what left the group (providers/reaping.py). This module knows no
protocol: what a line means, request ids, and the wording of every error belong to the wire
modules. It must never leave a process behind after `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

from corral_server.providers.reaping import TAG_ENV, kill_tagged, process_tag

# Claude Code's first lines carry its whole tool list (tens of kB), codex's notifications whole
# items (a command's output, a patch's diff); 16 MiB leaves room for large file contents and
# tool results while a runaway line still ends the connection.
MAX_LINE_BYTES = 16 * 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024
# SIGTERM, then SIGKILL to the group after this (node agents exit within ~0.2 s of SIGTERM).
TERM_GRACE_S = 2.0

Json: TypeAlias = Any
Key = TypeVar("Key", int, str)


class LineTooLong(Exception):
    """The child wrote a line over MAX_LINE_BYTES on stdout."""


class AgentProcess:
    """A spawned agent: its pipes, the stderr tail, and the tasks `close()` ends with it."""

    def __init__(self, proc: asyncio.subprocess.Process, tag: str, label: str) -> None:
        self._proc = proc
        self._tag = tag  # TAG_ENV of the process and all it spawns (providers/reaping.py)
        self._label = label  # names the reader tasks: "<label> stdout <pid>"
        self._stderr = bytearray()  # the last STDERR_KEEP_BYTES at most
        self._readers: list[asyncio.Task[None]] = []  # canceled and awaited by close()
        self._handlers: set[asyncio.Task[None]] = set()  # answers still running; same

    @classmethod
    async def spawn(
        cls, argv: Sequence[str], env: Mapping[str, str], cwd: str, label: str, daemon_tag: str
    ) -> AgentProcess:
        tag = process_tag(daemon_tag)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**env, TAG_ENV: tag},
            cwd=cwd,
            start_new_session=True,  # its own process group: see close()
            limit=MAX_LINE_BYTES,
        )
        return cls(proc, tag, label)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def tag(self) -> str:
        return self._tag

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    # --- tasks -----------------------------------------------------------------------------

    def start_readers(self, read_stdout: Coroutine[Any, Any, None]) -> None:
        """Run the wire's stdout reader, then this module's stderr reader, until close()."""
        self._readers = [
            asyncio.create_task(read_stdout, name=f"{self._label} stdout {self.pid}"),
            asyncio.create_task(self._read_stderr(), name=f"{self._label} stderr {self.pid}"),
        ]

    def start_handler(self, answer: Coroutine[Any, Any, None]) -> None:
        """Run one answer to a request of the child's; close() cancels it if it still runs."""
        task = asyncio.create_task(answer)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    # --- stderr ----------------------------------------------------------------------------

    def stderr_tail(self, chars: int = 2000) -> str:
        return self._stderr.decode(errors="replace")[-chars:]

    def with_stderr(self, reason: str) -> str:
        """`reason`, followed by the tail of stderr when there is one."""
        tail = self.stderr_tail(800).strip()
        return f"{reason}; stderr: {tail}" if tail else reason

    async def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        while chunk := await stderr.read(65536):
            self._stderr += chunk
            del self._stderr[:-STDERR_KEEP_BYTES]

    # --- stdout and stdin ------------------------------------------------------------------

    async def read_line(self) -> bytes | None:
        """The next stdout line that is not blank, stripped; None when stdout ends.
        Raises `LineTooLong` for a line over MAX_LINE_BYTES."""
        stdout = self._proc.stdout
        assert stdout is not None
        while True:
            try:
                raw = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as exc:
                raise LineTooLong() from exc
            if not raw:
                return None
            line = raw.strip()
            if line:
                return line

    async def exit_status(self, wait_s: float) -> int | None:
        """The exit status, waiting at most `wait_s` for it; None if it still runs."""
        rc = self._proc.returncode
        if rc is None:
            with contextlib.suppress(TimeoutError):
                rc = await asyncio.wait_for(self._proc.wait(), wait_s)
        return rc

    async def write_json(self, message: Mapping[str, Json]) -> None:
        """Write `message` as one compact JSON line; ConnectionError or RuntimeError when the
        pipe is gone."""
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await stdin.drain()

    # --- stopping --------------------------------------------------------------------------

    def kill_group(self) -> None:
        """SIGKILL the process group (the child and what it spawned in the group)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    async def close(self, eof_grace_s: float) -> None:
        """Close stdin and give the child `eof_grace_s` to exit, then SIGTERM the process
        group and SIGKILL it after a grace, then SIGKILL whatever still carries the tag; the
        tasks end with it. A close cut short by its caller (a deadline) still kills the group
        and the tagged processes: nothing is left."""
        try:
            await self._stop_gracefully(eof_grace_s)
        finally:
            # Stragglers whose leader exited, a close canceled midway, escaped commands.
            self.kill_group()
            kill_tagged(self._tag)
            for task in (*self._readers, *self._handlers):
                task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), TERM_GRACE_S)  # reaped: no zombie
        await asyncio.gather(*self._readers, *self._handlers, return_exceptions=True)

    async def _stop_gracefully(self, eof_grace_s: float) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), eof_grace_s)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), TERM_GRACE_S)


class PendingRequests(Generic[Key]):
    """Our requests that wait for the child's answer, by request id."""

    def __init__(self) -> None:
        self._futures: dict[Key, asyncio.Future[Json]] = {}

    def open(self, key: Key) -> asyncio.Future[Json]:
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._futures[key] = future
        return future

    def drop(self, key: Key) -> None:
        self._futures.pop(key, None)

    def waiting(self, key: Key) -> asyncio.Future[Json] | None:
        """The future of request `key` if it still waits for its answer."""
        future = self._futures.get(key)
        return None if future is None or future.done() else future

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        """Fail every waiting request with a fresh `error()`; the table is empty after."""
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(error())
