"""Agent processes by parentage: subreapers, the tree below an agent, killing it, and reaping
what comes back to the daemon. Linux only (prctl, /proc); elsewhere every function finds
nothing and does nothing.

The rules that keep one agent's close from touching another agent's processes:

- Each agent process is started through a shim that makes it a child subreaper before it
  execs the agent (the flag survives exec): whatever its descendants do (double fork, setsid,
  a cleared environment), an orphan reparents to that agent process, never further up. So
  while an agent process lives, its tree in /proc is exactly what it spawned.
- Closing an agent takes its tree while the agent process still lives, stops the agent
  process (SIGSTOP: it cannot fork any more), kills the tree round by round (a process may
  fork while we look; its orphans land on the stopped agent), then the agent process.
- The daemon (`corral serve`) is a subreaper too: what outlives its agent process (the agent
  exited and left a child behind) comes to the daemon instead of init. A child of the daemon
  that is no live agent process belongs to no live agent's tree (those stay below their own
  agent process), so `sweep_orphans` kills and reaps it, and only it: pids asyncio waits for
  (the agent processes, and any being spawned) are never touched.
- Every pid is paired with its start time, so a reused pid is never mistaken for ours.
- Where prctl is refused (a seccomp policy), the shim's and the daemon's alike (the policy is
  inherited): the daemon is then no subreaper and sweeps nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
# Exec'd by the agent's python (`-I -S`: no site, no PYTHON* variables): set the flag, exec.
SHIM = (
    "import ctypes,os,sys\n"
    "ctypes.CDLL(None).prctl(36,1,0,0,0)\n"
    "os.execvp(sys.argv[1],sys.argv[1:])\n"
)
KILL_ROUNDS = 8

# Agent processes asyncio waits for, and how many spawns are under way: never reaped here.
_live: set[int] = set()
_spawning = [0]


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    start: int  # clock ticks after boot: with the pid, names one process for good
    zombie: bool


Key = tuple[int, int]  # (pid, start time)


def _prctl(option: int, arg: int) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    if option == PR_GET_CHILD_SUBREAPER:
        value = ctypes.c_int(0)
        ok = libc.prctl(option, ctypes.byref(value), 0, 0, 0) == 0
        return value.value if ok else None
    return 0 if libc.prctl(option, arg, 0, 0, 0) == 0 else None


def become_subreaper() -> bool:
    """Make this process a child subreaper: orphans below it reparent to it, not init."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


def is_subreaper() -> bool:
    return bool(_prctl(PR_GET_CHILD_SUBREAPER, 0))


def subreaper_argv(argv: Iterable[str]) -> list[str]:
    """`argv` run through the shim that makes it a subreaper (Linux); `argv` elsewhere."""
    argv = list(argv)
    if not sys.platform.startswith("linux") or not argv or not sys.executable:
        return argv
    return [sys.executable, "-I", "-S", "-c", SHIM, *argv]


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Around a spawn: until its pid is `track`ed, no orphan sweep runs (it could take the
    fresh child, not yet known, for an orphan)."""
    _spawning[0] += 1
    try:
        yield
    finally:
        _spawning[0] -= 1


def track(pid: int) -> None:
    _live.add(pid)


def untrack(pid: int) -> None:
    _live.discard(pid)


def read(pid: int, proc_root: Path = PROC) -> Proc | None:
    try:
        raw = (proc_root / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The name (field 2) is in parentheses and may hold anything: split after the last one.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return Proc(pid, int(fields[1]), int(fields[19]), fields[0] == b"Z")
    except (IndexError, ValueError):
        return None


def table(proc_root: Path = PROC) -> dict[int, Proc]:
    """Every process visible in /proc, by pid."""
    procs: dict[int, Proc] = {}
    with contextlib.suppress(OSError):
        for entry in proc_root.iterdir():
            if entry.name.isdigit() and (proc := read(int(entry.name), proc_root)) is not None:
                procs[proc.pid] = proc
    return procs


def start_time(pid: int) -> int | None:
    proc = read(pid)
    return None if proc is None else proc.start


def descendants(roots: Iterable[int], procs: dict[int, Proc]) -> list[Proc]:
    """The processes below `roots` (not the roots), by parentage in `procs`."""
    children: dict[int, list[Proc]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    stack = list(roots)
    seen = set(stack)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                found.append(child)
                stack.append(child.pid)
    return found


def tree(leader: Key | None) -> list[Key]:
    """The processes below `leader` now, each with its start time (none when it is gone:
    its pid may name another process by now)."""
    procs = table()
    if leader is None or not _alive(leader, procs):
        return []
    return [(p.pid, p.start) for p in descendants([leader[0]], procs)]


def _alive(key: Key, procs: dict[int, Proc]) -> bool:
    proc = procs.get(key[0])
    return proc is not None and proc.start == key[1] and not proc.zombie


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_tree(leader: Key | None, known: Iterable[Key] = ()) -> list[Key]:
    """SIGKILL the leader, everything below it, the `known` processes that still live and
    everything below those: the leader is stopped first, then its tree killed a few rounds
    (a process may fork while we look), then the leader. The processes signalled."""
    known = list(known)
    killed: dict[Key, None] = {}
    procs = table()
    live_leader = leader is not None and _alive(leader, procs)
    if live_leader and leader is not None:
        _kill(leader[0], signal.SIGSTOP)  # no more forks; orphans of the tree land on it
    for _ in range(KILL_ROUNDS):
        roots = [key for key in known if _alive(key, procs)]
        if live_leader and leader is not None:
            roots.append(leader)
        targets = {key for key in roots if key != leader}
        targets.update((p.pid, p.start) for p in descendants([k[0] for k in roots], procs))
        targets = {key for key in targets if _alive(key, procs)}
        if not targets:
            break
        for key in targets:
            _kill(key[0], signal.SIGKILL)
            killed[key] = None
        procs = table()
    if live_leader and leader is not None:
        _kill(leader[0], signal.SIGKILL)
        killed[leader] = None
    return list(killed)


def reap(keys: Iterable[Key]) -> list[Key]:
    """Reap the zombies among `keys` that are children of this process (orphans that came
    back to it as a subreaper); never a pid asyncio waits for. The keys not reaped yet."""
    left = []
    me = os.getpid()
    for key in keys:
        proc = read(key[0])
        if proc is None or proc.start != key[1]:
            continue  # gone (reaped by its own parent, or init)
        if proc.ppid == me and proc.zombie and key[0] not in _live:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(key[0], os.WNOHANG)
                continue
        left.append(key)
    return left


def sweep_orphans() -> list[Key]:
    """A subreaper daemon's children that are no agent process it tracks: what outlived its
    agent process. Kill them (and what is below them) and reap the dead ones; the keys of
    those signalled. Nothing while a spawn is under way, or when not a subreaper."""
    if _spawning[0] or not is_subreaper():
        return []
    me = os.getpid()
    procs = table()
    orphans = [p for p in procs.values() if p.ppid == me and p.pid not in _live]
    reap((p.pid, p.start) for p in orphans if p.zombie)
    living = [(p.pid, p.start) for p in orphans if not p.zombie]
    return kill_tree(None, living) if living else []
