"""Workspaces between the domain (domain/workspace.py) and corral.v1 messages."""

from __future__ import annotations

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import workspace_service_pb2 as ws_pb
from corral_server.domain.workspace import (
    ChangeKind,
    ChangesPage,
    ChangesQuery,
    ChangesSince,
    FileChange,
    Workspace,
    WorkspaceRelease,
    WorktreeRequest,
)

_SINCE = {
    ws_pb.CHANGES_SINCE_UNSPECIFIED: ChangesSince.BASE,
    ws_pb.CHANGES_SINCE_BASE: ChangesSince.BASE,
    ws_pb.CHANGES_SINCE_LAST_TURN: ChangesSince.LAST_TURN,
    ws_pb.CHANGES_SINCE_COMMIT: ChangesSince.COMMIT,
}
_KIND = {
    ChangeKind.ADDED: ws_pb.CHANGE_KIND_ADDED,
    ChangeKind.MODIFIED: ws_pb.CHANGE_KIND_MODIFIED,
    ChangeKind.DELETED: ws_pb.CHANGE_KIND_DELETED,
    ChangeKind.RENAMED: ws_pb.CHANGE_KIND_RENAMED,
}


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


def changes_query_from_pb(request: ws_pb.GetChangesRequest) -> ChangesQuery:
    """The query; an unknown `since` (a newer client's) is INVALID_ARGUMENT by the caller."""
    return ChangesQuery(
        since=_SINCE[request.since],
        commit=request.commit,
        diff_paths=tuple(request.diff_paths),
        page_size=request.page_size,
        page_token=request.page_token,
        max_diff_bytes=request.max_diff_bytes,
    )


def known_since(request: ws_pb.GetChangesRequest) -> bool:
    return request.since in _SINCE


def _file_to_pb(change: FileChange) -> ws_pb.ChangedFile:
    return ws_pb.ChangedFile(
        path=change.path,
        old_path=change.old_path,
        kind=_KIND[change.kind],
        binary=change.binary,
        lines_added=change.lines_added,
        lines_removed=change.lines_removed,
    )


def changes_to_pb(page: ChangesPage) -> ws_pb.GetChangesResponse:
    return ws_pb.GetChangesResponse(
        repository=page.repository,
        since_tree=page.since_tree,
        files=[_file_to_pb(f) for f in page.files],
        next_page_token=page.next_page_token,
        total_files=page.total_files,
        lines_added=page.lines_added,
        lines_removed=page.lines_removed,
        diffs=[ws_pb.FileDiff(path=d.path, diff=d.diff, clipped=d.clipped) for d in page.diffs],
    )
