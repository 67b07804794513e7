"""providers/reaping.py: a daemon's tag is fixed by its state directory, and reaping kills the
processes carrying that daemon's tag and nothing else (another directory's, a tag that merely
starts alike)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral_server.providers import reaping


def test_the_daemon_tag_is_fixed_by_the_state_directory(tmp_path: Path) -> None:
    assert reaping.daemon_tag(tmp_path / "a") == reaping.daemon_tag(tmp_path / "b" / ".." / "a")
    assert reaping.daemon_tag(tmp_path / "a") != reaping.daemon_tag(tmp_path / "b")
    assert reaping.daemon_tag(None) != reaping.daemon_tag(None)  # no directory: its own
    ours = reaping.daemon_tag(tmp_path)
    assert reaping.process_tag(ours).startswith(ours + "-")
    assert reaping.process_tag(ours) != reaping.process_tag(ours)


@pytest.fixture
def sleepers() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """A sleeping process per tag value."""
    procs = {
        value: subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env={reaping.TAG_ENV: value},
        )
        for value in ("dirAAA-1", "dirAAA-2", "dirAAAB-1", "dirBBB-1")
    }
    try:
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_reaping_kills_exactly_the_processes_of_that_daemon_tag(
    sleepers: dict[str, subprocess.Popen[bytes]],
) -> None:
    killed = reaping.reap_leftovers("dirAAA")
    assert sorted(killed) == sorted(sleepers[v].pid for v in ("dirAAA-1", "dirAAA-2"))
    for value, proc in sleepers.items():
        proc_gone = proc.wait(10) if value.startswith("dirAAA-") else proc.poll()
        assert (proc_gone is not None) == value.startswith("dirAAA-")
    assert reaping.tagged_pids("dirBBB-1") == [sleepers["dirBBB-1"].pid]  # an exact tag
