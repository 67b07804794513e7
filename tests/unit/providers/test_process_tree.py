"""providers/process_tree.py and the ledger of providers/reaping.py: an agent process started
through the shim is a subreaper, so a double-forked child in a session of its own stays in its
tree; killing one tree leaves another alone and a reused pid is never taken for ours; only
untracked zombie children are reaped; the ledger keeps what was appended and not struck."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral_server.providers import process_tree, reaping
from corral_server.providers.process_tree import Key

# Prints the pid of a sleeper that left its parent (a double fork) and its session.
ESCAPE = "(setsid sleep 60 >/dev/null 2>&1 & echo $!); exec sleep 60"


def started(argv: list[str]) -> tuple[subprocess.Popen[str], Key]:
    """A leader through the shim, and the escaped sleeper it started."""
    proc = subprocess.Popen(process_tree.subreaper_argv(argv), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    start = process_tree.start_time(pid)
    assert start is not None
    return proc, (pid, start)


def until(predicate: Callable[[], bool], what: str) -> None:
    """Poll for 10 s at most (nothing signals a process's end to a non-parent)."""
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def parent(pid: int) -> int:
    proc = process_tree.read(pid)
    return -1 if proc is None else proc.ppid


def zombie(pid: int) -> bool:
    proc = process_tree.read(pid)
    return proc is not None and proc.zombie


def dead(key: Key) -> bool:
    proc = process_tree.read(key[0])
    return proc is None or proc.start != key[1] or proc.zombie


@pytest.fixture
def leaders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                process_tree.kill_tree((proc.pid, process_tree.start_time(proc.pid) or 0))
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def test_the_shim_makes_the_agent_process_a_subreaper_of_its_tree(
    leaders: list[subprocess.Popen[str]],
) -> None:
    proc, sleeper = started(["sh", "-c", ESCAPE])
    leaders.append(proc)
    until(lambda: parent(sleeper[0]) == proc.pid, "reparented to the leader")
    until(lambda: os.getsid(sleeper[0]) == sleeper[0], "in a session of its own")
    leader = (proc.pid, process_tree.start_time(proc.pid) or 0)
    assert sleeper in process_tree.tree(leader)
    assert process_tree.tree((proc.pid, leader[1] + 1)) == []  # another process by that pid
    flag = subprocess.run(
        process_tree.subreaper_argv(
            [
                sys.executable,
                "-c",
                "from corral_server.providers import process_tree as p;print(p.is_subreaper())",
            ]
        ),
        capture_output=True,
        text=True,
        env={**os.environ},
        check=True,
    )
    assert flag.stdout.strip() == "True"
    assert not process_tree.is_subreaper()  # this process was never made one


def test_killing_a_tree_leaves_another_alone_and_trusts_no_reused_pid(
    leaders: list[subprocess.Popen[str]],
) -> None:
    mine, my_sleeper = started(["sh", "-c", ESCAPE])
    theirs, their_sleeper = started(["sh", "-c", ESCAPE])
    leaders.extend([mine, theirs])
    until(lambda: parent(my_sleeper[0]) == mine.pid, "reparented")
    my_key = (mine.pid, process_tree.start_time(mine.pid) or 0)
    assert process_tree.kill_tree((mine.pid, my_key[1] + 1)) == []  # a stale record
    killed = process_tree.kill_tree(my_key)
    assert set(killed) == {my_key, my_sleeper}
    mine.wait(10)
    until(lambda: dead(my_sleeper), "my sleeper killed")
    assert not dead(their_sleeper) and theirs.poll() is None


def test_only_untracked_zombie_children_are_reaped() -> None:
    tracked = subprocess.Popen(["true"])
    untracked = subprocess.Popen(["true"])
    keys = [(p.pid, process_tree.start_time(p.pid) or 0) for p in (tracked, untracked)]
    process_tree.track(tracked.pid)
    try:
        until(lambda: all(zombie(k[0]) for k in keys), "exited")
        assert process_tree.reap(keys) == [keys[0]]  # the tracked one is asyncio's to wait for
        assert process_tree.read(untracked.pid) is None  # reaped
        assert process_tree.read(tracked.pid) is not None
    finally:
        process_tree.untrack(tracked.pid)
        tracked.wait()
        untracked.wait()


def test_the_ledger_keeps_what_was_appended_and_not_struck(tmp_path: Path) -> None:
    tag = reaping.daemon_tag(tmp_path)
    ledger = tmp_path / reaping.LEDGER
    ledger.write_text("+ 1 2\n- 1 2\n+ 3 4\n+ 5")  # a torn last line
    assert reaping.recorded(ledger) == [(3, 4)]
    reaping.reap_leftovers(tag, tmp_path)  # nothing runs by those: a fresh ledger
    assert not ledger.exists()
    for n in range(reaping.COMPACT_LINES + 10):
        reaping.record(tag, (n, 7))
        reaping.record(tag, (n, 7), add=False)
    reaping.record(tag, (99999, 7))
    assert reaping.recorded(ledger) == [(99999, 7)]
    assert len(ledger.read_text().splitlines()) < reaping.COMPACT_LINES  # rewritten short
    assert ledger.stat().st_mode & 0o777 == 0o600
