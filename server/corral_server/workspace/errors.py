"""The workspace's errors, each a branch of the domain tree (errors.py) with its own reason:

FailedPrecondition
├── GitMissing         git cannot be run                       GIT_UNAVAILABLE
├── NotARepository     the directory is in no git repository   NOT_A_REPOSITORY
├── GitFailed          git refused (its message quoted)        GIT_FAILED
├── WorkspaceDirty     uncommitted changes, no force           WORKSPACE_DIRTY
└── AgentNotClosed     the worktree of a live agent            AGENT_NOT_CLOSED
InvalidArgument
└── BadRevision        a base or `since` git cannot resolve    REVISION_NOT_FOUND
AlreadyExists
└── BranchExists       the new branch is taken                 BRANCH_EXISTS
NotFound
└── NoWorkspace        the agent has no worktree               WORKSPACE_NOT_FOUND
ProviderTimeout
└── GitTimeout         past the git call's deadline            GIT_TIMEOUT (DEADLINE_EXCEEDED)
"""

from __future__ import annotations

from collections.abc import Sequence

from corral_server import errors
from corral_server.errors import FieldViolation

# What an error quotes of git's own message (error texts stay small: docs/api.md#errors).
_MAX_QUOTE = 400


class GitMissing(errors.FailedPrecondition):
    reason = "GIT_UNAVAILABLE"

    def __init__(self, program: str) -> None:
        super().__init__(
            f"git is not installed or cannot run ({program!r} not found on PATH)",
            metadata={"program": program},
        )


class NotARepository(errors.FailedPrecondition):
    reason = "NOT_A_REPOSITORY"

    def __init__(self, path: str, field: str = "cwd") -> None:
        message = f"{path} is not inside a git repository"
        super().__init__(message, metadata={"path": path})
        self.violations = (FieldViolation(field, message),)


class GitFailed(errors.FailedPrecondition):
    reason = "GIT_FAILED"

    def __init__(self, message: str, args: Sequence[str]) -> None:
        command = " ".join(["git", *args[:3]])
        super().__init__(f"{command}: {message[:_MAX_QUOTE]}", metadata={"command": command})


class WorkspaceDirty(errors.FailedPrecondition):
    reason = "WORKSPACE_DIRTY"

    def __init__(self, path: str, changes: int) -> None:
        super().__init__(
            f"the worktree {path} holds {changes} uncommitted changes: commit them, or force",
            metadata={"path": path, "changes": str(changes)},
        )


class AgentNotClosed(errors.FailedPrecondition):
    reason = "AGENT_NOT_CLOSED"

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r} is not closed: close or archive it before removing its worktree",
            metadata={"agent_id": agent_id},
        )


class BadRevision(errors.InvalidArgument):
    reason = "REVISION_NOT_FOUND"

    def __init__(self, field: str, revision: str) -> None:
        super().__init__(
            f"{field}: {revision[:_MAX_QUOTE]!r} names no commit in the repository",
            FieldViolation(field, f"{revision[:_MAX_QUOTE]!r} names no commit"),
        )


class BranchExists(errors.AlreadyExists):
    reason = "BRANCH_EXISTS"

    def __init__(self, branch: str) -> None:
        message = f"branch {branch!r} already exists"
        super().__init__(message, metadata={"branch": branch})
        self.violations = (FieldViolation("worktree.branch", message),)


class NoWorkspace(errors.NotFound):
    reason = "WORKSPACE_NOT_FOUND"

    def __init__(self, agent_id: str, why: str = "has no worktree") -> None:
        super().__init__(f"agent {agent_id!r} {why}", metadata={"agent_id": agent_id})


class GitTimeout(errors.ProviderTimeout):
    reason = "GIT_TIMEOUT"

    def __init__(self, args: Sequence[str], seconds: float) -> None:
        errors.CorralError.__init__(
            self,
            f"git {' '.join(args[:2])} did not finish within {seconds:g} s",
            metadata={"call": f"git {' '.join(args[:2])}", "timeout_s": f"{seconds:g}"},
        )
        self.call = "git"
