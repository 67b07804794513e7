"""Workspaces between the domain (domain/workspace.py) and corral.v1 messages."""

from __future__ import annotations

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral_server.domain.workspace import Workspace, WorkspaceRelease, WorktreeRequest


def workspace_to_pb(workspace: Workspace) -> agent_pb.Workspace:
    return agent_pb.Workspace(
        repository=workspace.repository,
        branch=workspace.branch,
        base=workspace.base,
        base_commit=workspace.base_commit,
        path=workspace.path,
    )


def workspace_from_pb(msg: agent_pb.Workspace) -> Workspace:
    return Workspace(msg.repository, msg.branch, msg.base, msg.base_commit, msg.path)


def worktree_request_from_pb(request: svc_pb.CreateAgentRequest) -> WorktreeRequest | None:
    if not request.HasField("worktree"):
        return None
    return WorktreeRequest(branch=request.worktree.branch, base=request.worktree.base)


def release_to_pb(release: WorkspaceRelease) -> svc_pb.WorkspaceRelease:
    return svc_pb.WorkspaceRelease(
        agent_id=release.agent_id,
        path=release.path,
        removed=release.removed,
        kept_reason=release.kept_reason,
    )
