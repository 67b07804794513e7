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

Linux only (`/proc/<pid>/environ`); elsewhere nothing is found. Only processes of the
daemon's own user are ever signalled. This module must not kill anything it did not find by
an exact tag (or the daemon's exact prefix).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import uuid
from pathlib import Path

TAG_ENV = "CORRAL_AGENT_PROCESS"
PROC = Path("/proc")


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


def reap_leftovers(daemon: str) -> list[int]:
    """Start-up: kill every agent process a previous daemon with tag `daemon` left behind."""
    return kill_tagged(daemon, prefix=True)
