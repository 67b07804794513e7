"""Running git: one asyncio subprocess per call, under a deadline, its output bounded.

Every git call corral makes goes through `Git.run`, so none blocks the event loop, none waits
longer than its deadline (the process is killed), and none holds more than `max_bytes` of
output in memory (the rest is read and dropped, and the result says it was cut).

Must not: interpret what git prints (worktrees.py and changes.py do), or run a shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corral_server.workspace.errors import GitFailed, GitMissing, GitTimeout

# A git call that takes longer is stuck (a lock held elsewhere, a hook waiting for input).
DEFAULT_DEADLINE_S = 30.0
# What one call keeps of its standard output; the diffs of GetChanges ask for less.
DEFAULT_MAX_BYTES = 8 << 20
_CHUNK = 64 << 10
_MAX_STDERR = 4096

# Never prompt (for credentials, an editor) and speak English: we read its messages.
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "LC_ALL": "C", "LANGUAGE": "C"}


@dataclass(frozen=True, slots=True)
class GitResult:
    returncode: int
    stdout: bytes
    stderr: str
    cut: bool  # stdout went past max_bytes: what is here is its start

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Git:
    program: str = "git"
    deadline_s: float = DEFAULT_DEADLINE_S

    async def run(
        self,
        cwd: Path | str,
        *args: str,
        max_bytes: int = DEFAULT_MAX_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> GitResult:
        """`git ARGS` in `cwd`, whatever its exit status (GitMissing when git cannot be run,
        GitTimeout past the deadline)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.program,
                *args,
                cwd=str(cwd),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **_ENV, **(env or {})},
                # Its own process group: a timeout kills git and whatever it started (hooks,
                # filters), which would otherwise hold the pipes open past the kill.
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            if not await asyncio.to_thread(Path(cwd).is_dir):
                raise GitFailed(f"{cwd} is not a directory", args) from exc
            raise GitMissing(self.program) from exc
        except PermissionError as exc:
            raise GitMissing(self.program) from exc
        try:
            async with asyncio.timeout(self.deadline_s):
                (stdout, cut), stderr = await asyncio.gather(
                    _read_bounded(proc, max_bytes), _read_all(proc.stderr)
                )
                returncode = await proc.wait()
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            raise GitTimeout(args, self.deadline_s) from None
        except BaseException:
            _kill_group(proc)
            raise
        return GitResult(returncode, stdout, stderr.decode("utf-8", "replace")[:_MAX_STDERR], cut)

    async def check(
        self,
        cwd: Path | str,
        *args: str,
        max_bytes: int = DEFAULT_MAX_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """`git ARGS`, its output as text; GitFailed when it exits non-zero."""
        result = await self.run(cwd, *args, max_bytes=max_bytes, env=env)
        if result.returncode != 0:
            raise GitFailed(result.stderr.strip() or f"exit status {result.returncode}", args)
        return result.text


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _read_bounded(proc: asyncio.subprocess.Process, max_bytes: int) -> tuple[bytes, bool]:
    """Standard output up to max_bytes; the rest is read (so git is never blocked writing)
    and dropped."""
    assert proc.stdout is not None
    kept = bytearray()
    cut = False
    while chunk := await proc.stdout.read(_CHUNK):
        room = max_bytes - len(kept)
        if len(chunk) > room:
            cut = True
            chunk = chunk[: max(room, 0)]
        kept += chunk
    return bytes(kept), cut


async def _read_all(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    data = await stream.read()
    return data[-_MAX_STDERR * 4 :]
