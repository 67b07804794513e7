"""Reading and writing files beneath one directory (an agent's cwd) for the agents' file methods,
so that an agent can never reach a file outside it through them, however it races us.

- The path that is checked is the path that is opened: every component is opened with
  O_NOFOLLOW relative to the descriptor of the one before (openat walking from a descriptor
  of the cwd). A symlink anywhere in the path is refused, even one pointing inside; `..` is
  refused; an absolute path must lie (lexically) under the cwd as given or as resolved.
- Only regular files: a FIFO, device, socket or directory is refused before it is opened
  (lstat) and again after (fstat of what was opened, O_NONBLOCK so a FIFO never blocks).
- Reads and writes are bounded (MAX_FILE_BYTES): a bigger file is refused, never read.
- A write goes to a fresh temporary file in the target's directory (O_CREAT|O_EXCL), renamed
  over the target relative to the directory's descriptor: it never follows a symlink, never
  writes through a hard link, and never creates anything outside. Missing directories are
  created the same way, one component at a time.
- File work runs on a small pool of daemon threads of its own (never the default executor)
  with a timeout; a stuck operation holds at most its agent's slots and never the process's
  exit. Each sandbox may use PER_AGENT_SLOTS threads at once; a slot frees only when its
  thread is really done, so one agent's stuck file system never takes the whole pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import stat
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

MAX_FILE_BYTES = 16 * 1024 * 1024
FILE_TIMEOUT_S = 10.0
POOL_THREADS = 8
PER_AGENT_SLOTS = 2

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024

T = TypeVar("T")


class SandboxError(Exception):
    """A refused path or a failed file operation; the message is meant for the agent.
    `refused`: the request itself is bad (a path outside, not a file, too big)."""

    def __init__(self, message: str, *, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused


class FilePool:
    """A fixed number of daemon threads running file jobs; never joined, so a job stuck in
    the kernel (a hung network file system) never keeps the process from exiting."""

    def __init__(self, threads: int = POOL_THREADS) -> None:
        self._size = threads
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any], on_finished: Callable[[], None]) -> _Job:
        """Run `fn` on a pool thread; `on_finished` is called on the caller's loop once the
        thread is done with it (or skipped it, abandoned before it started)."""
        job = _Job(fn, asyncio.get_running_loop(), on_finished)
        with self._lock:
            if len(self._threads) < self._size:
                thread = threading.Thread(target=self._work, name="corral-files", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put(job)
        return job

    def _work(self) -> None:
        while True:
            self._jobs.get().run()


class _Job:
    def __init__(
        self,
        fn: Callable[[], Any],
        loop: asyncio.AbstractEventLoop,
        on_finished: Callable[[], None],
    ) -> None:
        self._fn = fn
        self._loop = loop
        self._on_finished = on_finished
        self.future: asyncio.Future[Any] = loop.create_future()
        self.abandoned = threading.Event()  # its waiter gave up: skip it if not started

    def run(self) -> None:
        result: Any = None
        error: BaseException | None = None
        if not self.abandoned.is_set():
            try:
                result = self._fn()
            except BaseException as exc:  # handed to the waiter
                error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._settle, result, error)

    def _settle(self, result: Any, error: BaseException | None) -> None:
        self._on_finished()
        if self.future.done():
            return
        if self.abandoned.is_set():
            self.future.cancel()  # nobody will look at its outcome
        elif error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


_pool = FilePool()


class FileSandbox:
    """The file methods of one agent, confined to `root` (its working directory)."""

    def __init__(
        self,
        root: str,
        *,
        max_bytes: int = MAX_FILE_BYTES,
        timeout_s: float = FILE_TIMEOUT_S,
        slots: int = PER_AGENT_SLOTS,
        pool: FilePool | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self._pool = pool or _pool
        # Held from submission until the thread is done: a stuck job keeps its slot.
        self._slots = asyncio.Semaphore(slots)

    async def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The file's text (UTF-8, bad bytes replaced), from 1-based `line`, `limit` lines at
        most; a missing file reads as empty."""
        return await self._run(lambda: read_text(self.root, path, line, limit, self.max_bytes))

    async def write_text(self, path: str, content: str) -> None:
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SandboxError(f"content is not valid Unicode text: {exc.reason}") from None
        if len(data) > self.max_bytes:
            raise SandboxError(f"content is {len(data)} bytes, over the {self.max_bytes} limit")
        await self._run(lambda: write_bytes(self.root, path, data))

    async def _run(self, fn: Callable[[], T]) -> T:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._slots.acquire()
                job = self._pool.submit(fn, self._slots.release)
                try:
                    return await asyncio.shield(job.future)
                except BaseException:
                    job.abandoned.set()
                    raise
        except TimeoutError:
            raise SandboxError(
                f"the file operation did not finish within {self.timeout_s:g} s", refused=False
            ) from None


# --- the blocking part (on a pool thread) ---------------------------------------------------


def components(root: str, path: str) -> list[str]:
    """The components of absolute `path` below `root` (as given or resolved), checked
    lexically: no `..`, no NUL, not the root itself."""
    if not path.startswith("/"):
        raise SandboxError(f"path must be absolute: {path}")
    if "\0" in path:
        raise SandboxError("path must not contain a NUL character")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise SandboxError(f"path must not contain '..': {path}")
    for base in dict.fromkeys((root, os.path.realpath(root))):
        prefix = [part for part in base.split("/") if part not in ("", ".")]
        if parts[: len(prefix)] == prefix:
            rest = parts[len(prefix) :]
            if not rest:
                raise SandboxError(f"not a regular file: {path}")
            return rest
    raise SandboxError(f"path is outside the agent's working directory: {path}")


def read_text(root: str, path: str, line: int | None, limit: int | None, max_bytes: int) -> str:
    data = read_bytes(root, path, max_bytes)
    text = data.decode("utf-8", errors="replace")
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max(line - 1, 0) if line is not None else 0
    end = start + max(limit, 0) if limit is not None else len(lines)
    return "".join(lines[start:end])


def read_bytes(root: str, path: str, max_bytes: int) -> bytes:
    """The file's bytes; b"" when it (or a directory on its way) does not exist."""
    parts = components(root, path)
    try:
        parent = _walk(root, parts[:-1], path, create=False)
    except FileNotFoundError:
        return b""
    try:
        fd = _open_file(parent, parts[-1], path)
    except FileNotFoundError:
        return b""
    finally:
        os.close(parent)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise _too_big(path, size, max_bytes)
        chunks, total = [], 0
        while chunk := os.read(fd, min(_CHUNK, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew while we read
                raise _too_big(path, total, max_bytes)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_bytes(root: str, path: str, data: bytes) -> None:
    parts = components(root, path)
    parent = _walk(root, parts[:-1], path, create=True)
    try:
        name = parts[-1]
        mode = _existing_mode(parent, name, path)
        temp = f".corral-{uuid.uuid4().hex[:16]}.tmp"
        fd = _os_call(path, os.open, temp, _CREATE_FLAGS, 0o666, dir_fd=parent)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if mode is not None:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
            _os_call(path, os.rename, temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise
    finally:
        os.close(parent)


def _walk(root: str, dirs: list[str], path: str, *, create: bool) -> int:
    """A descriptor of the directory `dirs` below `root`, each opened with O_NOFOLLOW from
    the one before (created when missing, with `create`). FileNotFoundError when one is
    missing; SandboxError for a symlink or a non-directory on the way."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        message = f"cannot open the working directory {root}: {exc.strerror or exc}"
        raise SandboxError(message, refused=False) from None
    try:
        for name in dirs:
            try:
                next_fd = _open_dir(fd, name, path)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    _os_call(path, os.mkdir, name, 0o777, dir_fd=fd)
                next_fd = _open_dir(fd, name, path)
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_dir(parent: int, name: str, path: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SandboxError(f"{name!r} in {path} is a symlink or not a directory") from None
        if isinstance(exc, FileNotFoundError):
            raise
        raise _failed(path, exc) from None


def _open_file(parent: int, name: str, path: str) -> int:
    """`name` in `parent`, opened for reading: a regular file before it is opened (no open of
    a device at all) and after (the same file, nothing swapped in between)."""
    before = _lstat(parent, name, path)
    if before is None:
        raise FileNotFoundError(path)
    _regular(before, path)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if exc.errno == errno.ELOOP:
            raise SandboxError(f"not a regular file (a symlink): {path}") from None
        raise _failed(path, exc) from None
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (
        before.st_dev,
        before.st_ino,
    ):
        os.close(fd)
        raise SandboxError(f"not a regular file (it changed while opened): {path}")
    return fd


def _existing_mode(parent: int, name: str, path: str) -> int | None:
    """The permission bits of the file a write replaces (None: there is none); refused when
    what is there is not a regular file."""
    st = _lstat(parent, name, path)
    if st is None:
        return None
    _regular(st, path)
    return stat.S_IMODE(st.st_mode)


def _lstat(parent: int, name: str, path: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _failed(path, exc) from None


def _regular(st: os.stat_result, path: str) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    kinds = (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    kind = next((label for test, label in kinds if test(st.st_mode)), "special")
    raise SandboxError(f"not a regular file ({kind}): {path}")


def _os_call(path: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except OSError as exc:
        raise _failed(path, exc) from None


def _failed(path: str, exc: OSError) -> SandboxError:
    return SandboxError(f"cannot access {path}: {exc.strerror or exc}", refused=False)


def _too_big(path: str, size: int, max_bytes: int) -> SandboxError:
    return SandboxError(
        f"{path} is {size} bytes, over the {max_bytes}-byte limit of the file methods"
    )
