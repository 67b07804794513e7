"""providers/sandbox.py on its own: what it refuses (symlinks, `..`, non-regular files, a file
over the limit, without reading it), what a write does (a new inode renamed into place: no
write through a symlink or a hard link, modes kept, directories made), and its pool (a stuck
job times out, holds only its own agent's slots, and is never joined)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral_server.providers import sandbox
from corral_server.providers.sandbox import FilePool, FileSandbox, SandboxError


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret").write_text("outside")
    return work


def test_components_are_checked_lexically(cwd: Path) -> None:
    root = str(cwd)
    assert sandbox.components(root, f"{cwd}/a//./b") == ["a", "b"]
    assert sandbox.components(root, f"{os.path.realpath(cwd)}/a") == ["a"]
    for bad in (f"{cwd}/../secret", f"{cwd}/a/../b", "a/b", f"{cwd}x/a", "/etc/passwd", root):
        with pytest.raises(SandboxError):
            sandbox.components(root, bad)
    with pytest.raises(SandboxError, match="NUL"):
        sandbox.components(root, f"{cwd}/a\0b")


def test_a_write_makes_directories_and_reads_back(cwd: Path) -> None:
    sandbox.write_bytes(str(cwd), f"{cwd}/x/y/z.txt", b"one\ntwo\nthree\n")
    assert sandbox.read_text(str(cwd), f"{cwd}/x/y/z.txt", None, None, 100) == "one\ntwo\nthree\n"
    assert sandbox.read_text(str(cwd), f"{cwd}/x/y/z.txt", 2, 1, 100) == "two\n"
    assert sandbox.read_bytes(str(cwd), f"{cwd}/x/nothing/here", 100) == b""
    assert sorted(os.listdir(cwd / "x" / "y")) == ["z.txt"]  # no temporary file left


def test_a_write_keeps_the_mode_and_never_writes_through_a_link(cwd: Path) -> None:
    secret = cwd.parent / "secret"
    os.link(secret, cwd / "hard")
    (cwd / "script").write_text("old")
    (cwd / "script").chmod(0o750)
    sandbox.write_bytes(str(cwd), f"{cwd}/hard", b"new")
    sandbox.write_bytes(str(cwd), f"{cwd}/script", b"new")
    assert secret.read_text() == "outside" and (cwd / "hard").read_text() == "new"
    assert stat.S_IMODE((cwd / "script").stat().st_mode) == 0o750
    (cwd / "soft").symlink_to(secret)
    with pytest.raises(SandboxError, match="symlink"):
        sandbox.write_bytes(str(cwd), f"{cwd}/soft", b"x")
    assert secret.read_text() == "outside"


@pytest.fixture
def specials(cwd: Path) -> Iterator[dict[str, str]]:
    os.mkfifo(cwd / "fifo")
    (cwd / "dir").mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(cwd / "sock"))
    try:
        yield {"fifo": "FIFO", "dir": "directory", "sock": "socket"}
    finally:
        listener.close()


def test_only_regular_files_are_read_or_written(cwd: Path, specials: dict[str, str]) -> None:
    for name, kind in {**specials, "null": "device"}.items():
        path = "/dev/null" if name == "null" else f"{cwd}/{name}"
        root = "/dev" if name == "null" else str(cwd)
        with pytest.raises(SandboxError, match=kind):
            sandbox.read_bytes(root, path, 100)
        with pytest.raises(SandboxError, match=kind):
            sandbox.write_bytes(root, path, b"x")


def test_a_file_over_the_limit_is_refused_without_reading_it(cwd: Path) -> None:
    with open(cwd / "huge", "wb") as huge:
        huge.truncate(200 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(SandboxError, match=r"209715200 bytes, over the 16777216-byte limit"):
            sandbox.read_bytes(str(cwd), f"{cwd}/huge", sandbox.MAX_FILE_BYTES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


async def test_a_write_over_the_limit_is_refused_before_anything(cwd: Path) -> None:
    files = FileSandbox(str(cwd), max_bytes=10)
    with pytest.raises(SandboxError, match="11 bytes, over the 10 limit"):
        await files.write_text(f"{cwd}/new", "x" * 11)
    await files.write_text(f"{cwd}/new", "x" * 10)
    with pytest.raises(SandboxError, match="not valid Unicode"):
        await files.write_text(f"{cwd}/new", "\udcff")
    assert (cwd / "new").read_text() == "x" * 10


async def test_a_stuck_job_times_out_and_holds_only_its_own_slots(cwd: Path) -> None:
    (cwd / "f").write_text("fine")
    pool = FilePool(threads=3)
    stuck = FileSandbox(str(cwd), timeout_s=0.2, slots=2, pool=pool)
    other = FileSandbox(str(cwd), timeout_s=5, slots=2, pool=pool)
    release = threading.Event()

    def hang() -> str:
        release.wait(30)
        return "late"

    try:
        for _ in range(3):  # the third waits for a slot the first two still hold
            with pytest.raises(SandboxError, match=r"did not finish within 0\.2 s"):
                await stuck._run(hang)
        assert await other.read_text(f"{cwd}/f") == "fine"  # a thread was left for it
        waiting = asyncio.create_task(other._run(hang))  # as a close cancels its handlers
        await asyncio.sleep(0)
        waiting.cancel()
        async with asyncio.timeout(1):  # the canceled waiter does not wait for its thread
            await asyncio.gather(waiting, return_exceptions=True)
        assert waiting.cancelled()
        assert all(t.daemon for t in pool._threads)  # never joined at exit
    finally:
        release.set()
    async with asyncio.timeout(5):  # the slots come back once the threads are done
        assert await stuck._run(lambda: "again") == "again"
