"""corral.v1.WorkspaceService: agents' git worktrees (workspace/), through the manager's
snapshots."""

from __future__ import annotations

from corral.v1 import workspace_service_pb2 as ws_pb
from corral.v1 import workspace_service_pb2_grpc as ws_grpc
from corral_server import errors
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds
from corral_server.rpc.errors import Ctx, unary
from corral_server.rpc.workspace_codec import (
    changes_query_from_pb,
    changes_to_pb,
    known_since,
    workspace_to_pb,
)
from corral_server.workspace.changes import Changes
from corral_server.workspace.errors import NoWorkspace
from corral_server.workspace.worktrees import Worktrees


class WorkspaceService(ws_grpc.WorkspaceServiceServicer):
    def __init__(self, manager: AgentManager, worktrees: Worktrees, changes: Changes) -> None:
        self._manager = manager
        self._worktrees = worktrees
        self._changes = changes

    @unary
    async def DeleteWorkspace(
        self, request: ws_pb.DeleteWorkspaceRequest, context: Ctx
    ) -> ws_pb.DeleteWorkspaceResponse:
        bounds.check_string(request.agent_id, self._manager.limits.max_id_chars, "agent_id")
        agent = self._manager.get(request.agent_id)
        if agent.workspace is None:
            raise NoWorkspace(agent.id)
        removed = await self._worktrees.delete(
            agent.id, agent.is_closed, agent.workspace, request.force
        )
        return ws_pb.DeleteWorkspaceResponse(
            workspace=workspace_to_pb(agent.workspace), removed=removed
        )

    @unary
    async def GetChanges(
        self, request: ws_pb.GetChangesRequest, context: Ctx
    ) -> ws_pb.GetChangesResponse:
        bounds.check_string(request.agent_id, self._manager.limits.max_id_chars, "agent_id")
        if not known_since(request):
            raise errors.InvalidArgument.field("since", f"unknown value {request.since}")
        agent = self._manager.get(request.agent_id)
        page = await self._changes.get(agent, changes_query_from_pb(request))
        return changes_to_pb(page)
