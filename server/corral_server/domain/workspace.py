"""An agent's git worktree, as the agent snapshot carries it, and what CreateAgent asks for."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorktreeRequest:
    """CreateAgent's `worktree`: a new branch (empty: derived from the title) from `base`
    (empty: the repository's HEAD)."""

    branch: str = ""
    base: str = ""


@dataclass(frozen=True, slots=True)
class Workspace:
    """The worktree corral made: `branch` from `base` (as asked; `base_commit` is what it
    resolved to) checked out at `path`, in the repository whose top level is `repository`."""

    repository: str
    branch: str
    base: str
    base_commit: str
    path: str


@dataclass(frozen=True, slots=True)
class WorkspaceRelease:
    """What archiving did to one agent's worktree: removed when clean, else kept (why)."""

    agent_id: str
    path: str
    removed: bool
    kept_reason: str = ""


class ChangeKind(enum.Enum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file that differs (paths from the repository's top level)."""

    path: str
    kind: ChangeKind
    old_path: str = ""  # a rename's path before
    binary: bool = False
    lines_added: int = 0
    lines_removed: int = 0


@dataclass(frozen=True, slots=True)
class FileDiff:
    path: str
    diff: str
    clipped: bool = False  # longer than its limit: `diff` is its start, cut at a line end


class ChangesSince(enum.Enum):
    BASE = "base"
    LAST_TURN = "last-turn"
    COMMIT = "commit"


@dataclass(frozen=True, slots=True)
class ChangesQuery:
    since: ChangesSince = ChangesSince.BASE
    commit: str = ""  # with COMMIT
    diff_paths: tuple[str, ...] = ()
    page_size: int = 0
    page_token: str = ""
    max_diff_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ChangesPage:
    repository: str
    since_tree: str
    files: tuple[FileChange, ...]
    next_page_token: str
    total_files: int
    lines_added: int
    lines_removed: int
    diffs: tuple[FileDiff, ...] = ()
