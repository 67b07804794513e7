"""Finding agent processes by an environment tag, and reaping what a dead daemon left.

Every process an adapter starts carries `CORRAL_AGENT_PROCESS=<daemon tag>-<session tag>` in
its environment, and so does everything it spawns (environments are inherited), whatever
process group or session it moves to: Claude Code runs each Bash command under setsid, so a
command's background child escapes a kill of the agent's process group.

- The session tag is random per process: closing one agent kills exactly its own processes.
- The daemon tag is a hash of the state directory's path: a daemon that was SIGKILLed never
  closed its agents, and the next daemon on the same directory (the directory's lock says
  there is no other) kills every process carrying its tag at start-up, before it serves.
  Without a state directory the daemon tag is random: nothing outlives such a daemon's data.

A tag does not survive a process that clears its environment (`setsid env -i ...`), so a
daemon with a state directory also keeps a ledger there (`agent-processes`): each agent
process's pid and start time, appended at spawn and struck at close, and what it spawns,
appended while it runs (tracking.py). The next daemon kills every recorded process that still
runs (the same pid and start time) with its whole tree by parentage (process_tree.py: an agent
process is a subreaper, so its tree holds all it spawned).

Linux only (`/proc/<pid>/environ`); elsewhere nothing is found. By tag, only processes of the
daemon's own user are ever signalled. This module must not kill anything it did not find by
an exact tag (or the daemon's exact prefix), or by a recorded pid and start time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import uuid
from pathlib import Path

from corral_server.providers import process_tree
from corral_server.providers.process_tree import Key

TAG_ENV = "CORRAL_AGENT_PROCESS"
PROC = Path("/proc")
LEDGER = "agent-processes"

COMPACT_LINES = 1024  # past this many struck lines, the ledger is rewritten with the live ones


class _Ledger:
    """One daemon's ledger file, and what it holds (so it can be rewritten short)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.live: dict[Key, None] = {}
        self.lines = 0
        self.lock = threading.Lock()  # records come from several threads


# The ledger of each daemon tag that has one (a daemon with a state directory).
_ledgers: dict[str, _Ledger] = {}


def daemon_tag(state_dir: Path | None) -> str:
    """The tag every agent process of a daemon on `state_dir` carries (random without one)."""
    if state_dir is None:
        return f"run{uuid.uuid4().hex[:16]}"
    resolved = str(Path(state_dir).resolve())
    return "dir" + hashlib.sha256(resolved.encode()).hexdigest()[:24]


def process_tag(daemon: str) -> str:
    """A fresh tag for one agent process (and its children) of the daemon tagged `daemon`."""
    session = uuid.uuid4().hex
    return f"{daemon}-{session}" if daemon else session


def tagged_pids(tag: str, *, prefix: bool = False, proc_root: Path = PROC) -> list[int]:
    """Live processes of this user whose environment holds TAG_ENV=`tag` (with `prefix`:
    TAG_ENV=`tag`-<anything>). Not this process; zombies have no environment left."""
    needle = f"{TAG_ENV}={tag}".encode()
    start = needle + b"-"
    uid = os.getuid()
    found = []
    with contextlib.suppress(OSError):
        for entry in proc_root.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            values = environ.split(b"\0")
            if prefix:
                if any(value.startswith(start) for value in values):
                    found.append(int(entry.name))
            elif needle in values:
                found.append(int(entry.name))
    return found


def kill_tagged(tag: str, *, prefix: bool = False, rounds: int = 3) -> list[int]:
    """SIGKILL every process carrying `tag` (see `tagged_pids`), a few rounds (one may fork
    while we look); the pids signalled."""
    killed: dict[int, None] = {}  # a killed process may still be listed in the next round
    for _ in range(rounds):
        pids = tagged_pids(tag, prefix=prefix)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed[pid] = None
    return list(killed)


def reap_leftovers(daemon: str, state_dir: Path | None = None) -> list[int]:
    """Start-up: kill every agent process a previous daemon with tag `daemon` left behind:
    (with `state_dir`) every process its ledger records that still runs, with its tree, then
    whatever carries the tag. The ledger starts afresh for this daemon. The pids signalled."""
    killed: dict[int, None] = {}
    if state_dir is not None:
        # Before the tags: a recorded agent process killed by its tag first would leave its
        # tree to init, where parentage finds it no more.
        ledger = Path(state_dir) / LEDGER
        for key in recorded(ledger):
            killed.update(dict.fromkeys(pid for pid, _ in process_tree.kill_tree(key)))
        with contextlib.suppress(OSError):
            ledger.unlink()
        _ledgers[daemon] = _Ledger(ledger)
    killed.update(dict.fromkeys(kill_tagged(daemon, prefix=True)))
    return list(killed)


def recorded(ledger: Path) -> list[Key]:
    """The processes a ledger holds: those appended (`+ pid start`) and not struck (`-`)."""
    keys: dict[Key, None] = {}
    with contextlib.suppress(OSError):
        for line in ledger.read_text().splitlines():
            sign, *numbers = line.split()
            if len(numbers) != 2 or not all(n.isdigit() for n in numbers):
                continue  # a torn last line
            key = (int(numbers[0]), int(numbers[1]))
            if sign == "+":
                keys[key] = None
            elif sign == "-":
                keys.pop(key, None)
    return list(keys)


def record(daemon: str, key: Key, *, add: bool = True) -> None:
    """Append agent process `key` to the ledger of daemon tag `daemon` (strike it with
    `add=False`); nothing without a ledger. Blocking: call it from a thread."""
    ledger = _ledgers.get(daemon)
    if ledger is None:
        return
    with ledger.lock:
        if add:
            ledger.live[key] = None
        else:
            ledger.live.pop(key, None)
        ledger.lines += 1
        if ledger.lines <= COMPACT_LINES + 2 * len(ledger.live):
            _write(ledger.path, f"{'+' if add else '-'} {key[0]} {key[1]}\n", append=True)
            return
        temp = ledger.path.with_name(LEDGER + ".tmp")
        _write(temp, "".join(f"+ {pid} {start}\n" for pid, start in ledger.live), append=False)
        with contextlib.suppress(OSError):
            os.replace(temp, ledger.path)
        ledger.lines = len(ledger.live)


def _write(path: Path, text: str, *, append: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    with contextlib.suppress(OSError):
        fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
