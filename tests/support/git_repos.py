"""Real git repositories in temporary directories, for the workspace tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

# Commits need an identity; the tests never read the user's own configuration.
_ENV = {
    "GIT_AUTHOR_NAME": "corral tests",
    "GIT_AUTHOR_EMAIL": "tests@corral.invalid",
    "GIT_COMMITTER_NAME": "corral tests",
    "GIT_COMMITTER_EMAIL": "tests@corral.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin:/usr/local/bin",
}


def git(cwd: Path | str, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_ENV, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on branch `main` with one commit holding `files`."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "-b", "main")
    for name, text in (files or {"README.md": "hello\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    commit_all(path, "first")
    return path


def commit_all(path: Path | str, message: str) -> str:
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", message)
    return git(path, "rev-parse", "HEAD").strip()


def branches(path: Path) -> set[str]:
    return set(git(path, "branch", "--format=%(refname:short)").split())


def worktree_paths(path: Path) -> list[str]:
    out = git(path, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]
