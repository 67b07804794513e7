"""An agent's git worktree, as the agent snapshot carries it, and what CreateAgent asks for."""

from __future__ import annotations

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
