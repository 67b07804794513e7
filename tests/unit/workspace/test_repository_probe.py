"""Finding an agent's repository: a cwd in no repository is known without running git (a
daemon's first turns would otherwise start one git process per agent at once), and every
cwd git could place in a repository still goes to git."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from corral_server.workspace.errors import NotARepository
from corral_server.workspace.git import Git
from corral_server.workspace.trees import Trees


def _recording_git(tmp_path: Path) -> tuple[Git, Path]:
    """A git that logs each call to a file, then runs the real one."""
    calls = tmp_path / "calls"
    script = tmp_path / "git"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec git "$@"\n')
    script.chmod(0o755)
    return Git(program=str(script)), calls


def test_a_cwd_in_no_repository_runs_no_git(tmp_path: Path) -> None:
    git, calls = _recording_git(tmp_path)
    cwd = tmp_path / "plain" / "deeper"
    cwd.mkdir(parents=True)
    with pytest.raises(NotARepository):
        asyncio.run(Trees(git).top_level(str(cwd)))
    assert not calls.exists()


@pytest.mark.parametrize("where", ["top", "inside", "link"])
def test_a_cwd_in_a_repository_still_asks_git(tmp_path: Path, where: str) -> None:
    git, calls = _recording_git(tmp_path)
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    cwd = {"top": repo, "inside": repo / "src", "link": tmp_path / "link"}[where]
    if where == "link":  # git walks up the real path, not the link's parents
        cwd.symlink_to(repo / "src")
    assert asyncio.run(Trees(git).top_level(str(cwd))) == repo.resolve()
    assert calls.read_text().split() == ["rev-parse", "--show-toplevel"]


def test_a_linked_worktree_or_submodule_with_a_git_file_asks_git(tmp_path: Path) -> None:
    git, calls = _recording_git(tmp_path)
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    (cwd / ".git").write_text("gitdir: /nowhere\n")  # git decides; here it refuses
    with pytest.raises(NotARepository):
        asyncio.run(Trees(git).top_level(str(cwd)))
    assert calls.exists()
