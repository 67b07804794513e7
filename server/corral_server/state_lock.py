"""The state directory's lock: one daemon at a time owns a state directory, and its lock file
names that daemon's pid for whoever is refused."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from corral_server.store.database import LOCK_FILE
from corral_server.store.private import make_private


class StateDirLocked(RuntimeError):
    pass


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the state directory for the daemon's lifetime."""
    make_private(state_dir, LOCK_FILE)  # 0700, and the lock file made 0600 before it is opened
    handle = (state_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StateDirLocked(
            f"another corral daemon (pid {holder}) holds the state directory {state_dir}; "
            "stop it or pass a different --state-dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
