"""One agent child process, under the line connection every adapter runs on (connection.py):
spawning it, its bounded stderr tail, its stdout lines, writing a JSON line, the tasks that live
as long as it does, and stopping it with whatever it spawned.

The child runs in its own process group, so closing it stops whatever it spawned, carries
an environment tag that finds what left the group (providers/reaping.py), and is a child
subreaper, so that what it spawned stays in its tree by parentage whatever it does to its
environment or session (providers/process_tree.py); a daemon with a state directory records it
and what it spawns in its ledger (providers/tracking.py), found by the next daemon after a
SIGKILL. This module knows no
protocol: what a line means, request ids, and the wording of every error belong to
connection.py and the protocols above it. It must never leave a process behind after `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from corral_server.providers import process_tree, tracking
from corral_server.providers.reaping import TAG_ENV, kill_tagged, process_tag, record

# Claude Code's first lines carry its whole tool list (tens of kB), codex's notifications whole
# items (a command's output, a patch's diff); 16 MiB leaves room for large file contents and
# tool results while a runaway line still ends the connection.
MAX_LINE_BYTES = 16 * 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024
# SIGTERM, then SIGKILL to the group after this (node agents exit within ~0.2 s of SIGTERM).
TERM_GRACE_S = 2.0
# After the kill, how long close waits for what came back to the daemon to be reaped.
REAP_WAIT_S = 1.0
REAP_POLL_S = 0.01


class LineTooLong(Exception):
    """The child wrote a line over MAX_LINE_BYTES on stdout."""


class AgentProcess:
    """A spawned agent: its pipes, the stderr tail, and the tasks `close()` ends with it."""

    def __init__(
        self, proc: asyncio.subprocess.Process, tag: str, label: str, daemon_tag: str = ""
    ) -> None:
        self._proc = proc
        self._tag = tag  # TAG_ENV of the process and all it spawns (providers/reaping.py)
        self._daemon_tag = daemon_tag  # whose ledger records it
        start = process_tree.start_time(proc.pid)
        self._key = None if start is None else (proc.pid, start)
        # What it spawns, recorded while it runs (tracking.py); None off Linux.
        self._tree: tracking.TreeRecord | None = None
        self._label = label  # names the reader tasks: "<label> stdout <pid>"
        self._stderr = bytearray()  # the last STDERR_KEEP_BYTES at most
        self._readers: list[asyncio.Task[None]] = []  # canceled and awaited by close()
        self._handlers: set[asyncio.Task[None]] = set()  # answers still running; same

    @classmethod
    async def spawn(
        cls, argv: Sequence[str], env: Mapping[str, str], cwd: str, label: str, daemon_tag: str
    ) -> AgentProcess:
        tag = process_tag(daemon_tag)
        _check_command(argv, env, cwd)
        with process_tree.spawning():
            proc = await asyncio.create_subprocess_exec(
                *process_tree.subreaper_argv(argv),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**env, TAG_ENV: tag},
                cwd=cwd,
                start_new_session=True,  # its own process group: see close()
                limit=MAX_LINE_BYTES,
            )
            process_tree.track(proc.pid)
        child = cls(proc, tag, label, daemon_tag)
        if child._key is not None:
            await asyncio.to_thread(record, daemon_tag, child._key)
            child._tree = tracking.watch(child._key, daemon_tag)
        return child

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
            if self._tree is not None:
                self._tree.active = True  # it may have spawned something: look again
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

    async def write_json(self, message: Mapping[str, object]) -> None:
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
        group and SIGKILL it after a grace; then SIGKILL its tree as it was before and as
        recorded while it ran (and what is below those now), the group and whatever still
        carries the tag; the tasks end with it. A close cut short by its caller (a deadline)
        still kills all of them: nothing is left. What came back to the daemon (a subreaper)
        is reaped."""
        tree = [] if self._tree is None else list(self._tree.recorded)
        if self._tree is not None:
            tracking.unwatch(self._tree)
        try:
            # Taken while it lives: everything it spawned is below it (it is a subreaper).
            tree += await asyncio.to_thread(process_tree.tree, self._key)
            await self._stop_gracefully(eof_grace_s)
        finally:
            # Its tree, stragglers whose leader exited, a close canceled midway, escapees.
            killed = process_tree.kill_tree(self._key, tree)
            self.kill_group()
            kill_tagged(self._tag)
            for task in (*self._readers, *self._handlers):
                task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), TERM_GRACE_S)  # reaped: no zombie
        if self._proc.returncode is not None:
            process_tree.untrack(self.pid)  # asyncio is done with its pid
        await _reap([*killed, *process_tree.sweep_orphans()])
        if self._tree is not None:
            await asyncio.to_thread(tracking.strike, self._tree)
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


def _check_command(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> None:
    """FileNotFoundError when the command cannot be found, as a direct spawn would raise
    (the subreaper shim would only fail after it started)."""
    if not argv:
        return
    command = argv[0]
    if "/" in command:
        found = os.access(os.path.join(cwd, command), os.X_OK)
    else:
        found = shutil.which(command, path=env.get("PATH", os.defpath)) is not None
    if not found:
        raise FileNotFoundError(2, "No such file or directory", command)


async def _reap(killed: list[process_tree.Key]) -> None:
    """Reap what was killed and came back to the daemon, for REAP_WAIT_S at most (a SIGKILL
    takes effect soon, not at once); the rest is init's or a later sweep's."""
    for _ in range(int(REAP_WAIT_S / REAP_POLL_S)):
        if not (killed := process_tree.reap(killed)):
            return
        await asyncio.sleep(REAP_POLL_S)  # nothing tells us when a SIGKILL took effect
