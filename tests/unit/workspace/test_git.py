"""The git runner: a call past its deadline is killed and reported, a missing program is a clear
error, and output past its bound is cut and said to be (the program here stands in for git)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral_server.workspace.errors import GitMissing, GitTimeout
from corral_server.workspace.git import Git


def program(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-git"
    path.write_text(f"#!/bin/sh\n{body}\n")
    os.chmod(path, 0o755)
    return str(path)


async def test_a_call_past_its_deadline_is_killed(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    git = Git(program(tmp_path, f"sleep 30; touch {marker}"), deadline_s=0.2)
    with pytest.raises(GitTimeout) as late:
        await git.run(tmp_path, "status")
    assert late.value.reason == "GIT_TIMEOUT" and "0.2 s" in late.value.message
    assert not marker.exists()


async def test_a_missing_git_is_git_unavailable(tmp_path: Path) -> None:
    with pytest.raises(GitMissing) as missing:
        await Git(str(tmp_path / "nowhere"), deadline_s=5).run(tmp_path, "status")
    assert missing.value.reason == "GIT_UNAVAILABLE"


async def test_output_past_its_bound_is_cut_and_read_to_the_end(tmp_path: Path) -> None:
    git = Git(program(tmp_path, "head -c 300000 /dev/zero; echo done >&2"), deadline_s=10)
    result = await git.run(tmp_path, "diff", max_bytes=1000)
    assert (len(result.stdout), result.cut, result.returncode) == (1000, True, 0)
    assert result.stderr.strip() == "done"
