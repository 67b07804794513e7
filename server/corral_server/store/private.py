"""The state directory is private to the user who runs corral: the directory 0700 and every file
in it 0600, whatever the umask, since the database holds every prompt and reply.

`make_private(state_dir)` runs at start-up, before the database opens: it creates the directory
0700 (its parents keep their own modes), pre-creates the database file 0600 (SQLite gives the
-wal and -shm files it makes later the database file's mode) and fixes whatever the directory
already holds that others could reach: directories to 0700, regular files to 0600. It logs one
line naming each change. Symbolic links are never followed (their targets are not ours to
change): an entry is fixed through a descriptor opened with O_NOFOLLOW, checked to be the file
that was listed.

Must not: change the process umask (agent processes inherit it, and the files they write in the
user's projects would turn private too); raise (a directory it cannot use is the database's to
report, with its own clear error).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077  # group and other bits: what "private" removes


def make_private(state_dir: Path, *create: str) -> list[str]:
    """Make `state_dir` private and create the files named in `create` (0600, empty) if they
    are missing; the changes made (also logged, in one line)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    except OSError:
        return []  # the store says why it cannot use the directory
    changes: list[str] = []
    _fix(state_dir, "the directory", changes)
    for root, dirs, files in os.walk(state_dir):  # symbolic links are listed, not entered
        for name in (*dirs, *files):
            path = Path(root, name)
            _fix(path, str(path.relative_to(state_dir)), changes)
    for name in create:
        with contextlib.suppress(OSError):
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            os.close(os.open(state_dir / name, flags, FILE_MODE))
    if changes:
        log.warning("state directory %s made private: %s", state_dir, ", ".join(changes))
    return changes


def _fix(path: Path, name: str, changes: list[str]) -> None:
    """Take group and other access off a directory (0700) or regular file (0600)."""
    try:
        listed = os.lstat(path)
    except OSError:
        return  # gone meanwhile
    if stat.S_ISDIR(listed.st_mode):
        wanted, flags = DIR_MODE, os.O_RDONLY | os.O_DIRECTORY
    elif stat.S_ISREG(listed.st_mode):
        wanted, flags = FILE_MODE, os.O_RDONLY | os.O_NONBLOCK
    else:
        return  # links, sockets, FIFOs: nothing we write, nothing to open
    mode = stat.S_IMODE(listed.st_mode)
    if not mode & _OTHERS:
        return
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        changes.append(f"{name} left {mode:04o} ({exc.strerror})")
        return
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (listed.st_dev, listed.st_ino):
            return  # replaced between the listing and the open: not the file we looked at
        os.fchmod(fd, wanted)
        changes.append(f"{name} {mode:04o} -> {wanted:04o}")
    except OSError as exc:
        changes.append(f"{name} left {mode:04o} ({exc.strerror})")
    finally:
        os.close(fd)
