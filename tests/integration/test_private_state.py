"""The state directory is private, through a real `corral serve`: created 0700 with every file
in it 0600 (the database, its -wal and -shm, the lock), whatever the umask; one left open by an
older daemon is fixed at start-up with one log line, without following symbolic links; and
another user (uid 65534, via subprocess's own setuid) can read neither the database nor the
directory.

The directories live under a 0755 base in /tmp (pytest's own base is 0700, which would hide
the state from other users whatever corral did).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonProcess

NOBODY = 65534
STATE_FILES = ("corral.db", "corral.db-wal", "corral.db-shm", "corral.lock")


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A directory every user may enter, as a home directory often is."""
    base = Path(tempfile.mkdtemp(prefix="corral-private-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
    )


def run_a_turn(address: str, cwd: Path) -> None:
    """A turn, so the write-ahead log and its index exist."""
    with grpc.insecure_channel(address) as channel:
        stubs = Stubs.of(channel)
        agent_id = stubs.agents.CreateAgent(create_request(str(cwd)), timeout=30).agent.id
        request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("a secret: 4711"))
        _ = list(stubs.turns.StreamTurn(request, timeout=30))


def test_a_new_state_directory_is_0700_and_every_file_in_it_0600(
    shared_base: Path, tmp_path: Path
) -> None:
    state = shared_base / "state"
    old_umask = os.umask(0o022)  # what the daemon inherits: the usual, permissive one
    try:
        proc = DaemonProcess(state).start()
    finally:
        os.umask(old_umask)
    try:
        run_a_turn(proc.address, tmp_path)
        assert mode(state) == 0o700
        assert {name: mode(state / name) for name in STATE_FILES} == dict.fromkeys(
            STATE_FILES, 0o600
        )
        assert sorted(p.name for p in state.iterdir()) == sorted(STATE_FILES)
    finally:
        proc.stop()


def test_another_user_can_read_neither_the_database_nor_the_directory(
    shared_base: Path, tmp_path: Path
) -> None:
    readable = shared_base / "readable"
    readable.write_text("anyone\n")
    readable.chmod(0o644)
    assert as_nobody("cat", str(readable)).stdout == "anyone\n"  # the check itself works
    state = shared_base / "state"
    proc = DaemonProcess(state).start()
    try:
        run_a_turn(proc.address, tmp_path)
        for path in (state / "corral.db", state / "corral.db-wal"):
            refused = as_nobody("cat", str(path))
            assert refused.returncode != 0 and "Permission denied" in refused.stderr
        listing = as_nobody("ls", str(state))
        assert listing.returncode != 0 and "Permission denied" in listing.stderr
    finally:
        proc.stop()


def test_an_open_state_directory_is_fixed_at_start_up_with_one_log_line(
    shared_base: Path,
) -> None:
    state = shared_base / "state"
    (state / "old").mkdir(parents=True)
    state.chmod(0o755)
    (state / "old").chmod(0o755)
    for name in ("corral.db", "notes.txt", "old/kept.txt"):
        (state / name).touch()
        (state / name).chmod(0o644)
    outside = shared_base / "outside.txt"
    outside.touch()
    outside.chmod(0o644)
    (state / "link").symlink_to(outside)
    proc = DaemonProcess(state).start()
    try:
        line = proc.wait_for_log("made private")
        for change in (
            "the directory 0755 -> 0700",
            "corral.db 0644 -> 0600",
            "notes.txt 0644 -> 0600",
            "old 0755 -> 0700",
            "old/kept.txt 0644 -> 0600",
        ):
            assert change in line, line
        assert "link" not in line and "outside" not in line
        assert (mode(state), mode(state / "old")) == (0o700, 0o700)
        for name in ("corral.db", "notes.txt", "old/kept.txt", "corral.lock"):
            assert mode(state / name) == 0o600, name
        assert mode(outside) == 0o644  # a link's target is not ours to change
    finally:
        proc.stop()
