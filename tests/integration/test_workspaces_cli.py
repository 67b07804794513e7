"""`corral run --worktree`, `corral archive` and `corral worktree rm` against a real daemon and
real git: the agent's worktree, what archive did to it, its removal on request."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonThread
from tests.support.git_repos import branches, make_repo, worktree_paths

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def test_run_in_a_worktree_then_archive_keeps_a_dirty_one_and_rm_forces_it(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    repo = make_repo(tmp_path / "repo")
    argv = ("run", "--cwd", str(repo), "--worktree", "try/cli", "--title", "cli", "hi")
    assert cli(addr, *argv) == 0
    err = capsys.readouterr().err
    agent_id = re.search(r"^agent (\S+)$", err, re.MULTILINE).group(1)  # type: ignore[union-attr]
    path = tmp_path / "repo.worktrees" / "try-cli"
    assert f"worktree {path} on branch try/cli from HEAD" in err
    (path / "notes.txt").write_text("unsaved\n")
    assert cli(addr, "archive", agent_id) == 0
    assert capsys.readouterr().out == (
        f"archived {agent_id}\nkept worktree {path}: 1 uncommitted change\n"
    )
    assert cli(addr, "worktree", "rm", agent_id[:12]) == 2
    assert "WORKSPACE_DIRTY" in capsys.readouterr().err and path.exists()
    assert cli(addr, "worktree", "rm", agent_id, "--force") == 0
    assert capsys.readouterr().out == f"removed {path} (branch try/cli kept)\n"
    assert "try/cli" in branches(repo) and worktree_paths(repo) == [str(repo)]


def test_run_with_a_taken_branch_creates_no_agent(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    repo = make_repo(tmp_path / "repo")
    assert cli(addr, "run", "--cwd", str(repo), "--worktree", "main", "hi") == 1
    err = capsys.readouterr().err
    assert "BRANCH_EXISTS" in err and "agent " not in err
    assert not (tmp_path / "repo.worktrees").exists()


def test_diff_prints_the_stat_every_diff_or_one_file(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n", "b.txt": "bee\n"})
    assert cli(addr, "run", "--cwd", str(repo), "--worktree", "d", "hi") == 0
    err = capsys.readouterr().err
    agent_id = re.search(r"^agent (\S+)$", err, re.MULTILINE).group(1)  # type: ignore[union-attr]
    path = tmp_path / "repo.worktrees" / "d"
    (path / "a.txt").write_text("one\ntwo\n")
    (path / "b.txt").unlink()
    (path / "c.bin").write_bytes(b"\x00\x01")
    assert cli(addr, "diff", agent_id, "--stat") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[:3]] == [
        ["M", "+1", "-0", "a.txt"],
        ["D", "+0", "-1", "b.txt"],
        ["A", "bin", "c.bin"],
    ]
    assert lines[3].startswith("3 files changed, +1 -1 (since ")
    assert cli(addr, "diff", agent_id) == 0
    out = capsys.readouterr().out
    assert out.count("diff --git") == 3 and " one\n+two\n" in out and "-bee\n" in out
    assert cli(addr, "diff", agent_id, "a.txt") == 0
    one = capsys.readouterr().out
    assert one.startswith("diff --git a/a.txt b/a.txt") and "b.txt" not in one
    assert cli(addr, "diff", agent_id, "--since", "no-such-commit") == 2
    assert "REVISION_NOT_FOUND" in capsys.readouterr().err
