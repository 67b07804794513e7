"""corral.v1.SubagentService: translates requests to registry calls and runs back."""

from __future__ import annotations

from corral.v1 import subagent_service_pb2 as svc_pb
from corral.v1 import subagent_service_pb2_grpc as svc_grpc
from corral_server import errors
from corral_server.rpc import bounds
from corral_server.rpc.errors import Ctx, unary
from corral_server.rpc.subagent_codec import run_to_pb, spawn_from_pb
from corral_server.subagents.registry import SubagentRegistry
from corral_server.subagents.steer import check_message


class SubagentService(svc_grpc.SubagentServiceServicer):
    def __init__(self, registry: SubagentRegistry) -> None:
        self._registry = registry

    @unary
    async def SpawnSubagent(
        self, request: svc_pb.SpawnSubagentRequest, context: Ctx
    ) -> svc_pb.SpawnSubagentResponse:
        limits = self._registry.request_limits
        for field in ("requester_agent_id", "controller_agent_id", "provider", "model"):
            bounds.check_string(getattr(request, field), limits.max_id_chars, field)
        bounds.check_string(request.task, limits.max_prompt_chars, "task")
        if not request.requester_agent_id:
            raise errors.InvalidArgument.field("requester_agent_id", "required")
        run = await self._registry.spawn(spawn_from_pb(request))
        return svc_pb.SpawnSubagentResponse(run=run_to_pb(run))

    @unary
    async def ListSubagentRuns(
        self, request: svc_pb.ListSubagentRunsRequest, context: Ctx
    ) -> svc_pb.ListSubagentRunsResponse:
        bounds.check_string(
            request.agent_id, self._registry.request_limits.max_id_chars, "agent_id"
        )
        runs, counts = self._registry.list_runs(
            request.agent_id, request.descendants, request.active_only
        )
        return svc_pb.ListSubagentRunsResponse(
            runs=[run_to_pb(r) for r in runs],
            active_descendants=counts.active,
            pending_descendants=counts.pending,
        )

    @unary
    async def KillSubagentRun(
        self, request: svc_pb.KillSubagentRunRequest, context: Ctx
    ) -> svc_pb.KillSubagentRunResponse:
        _check_run_id(request.run_id, self._registry)
        killed = await self._registry.kill(request.run_id, request.cascade)
        return svc_pb.KillSubagentRunResponse(killed_run_ids=killed)

    @unary
    async def SteerSubagentRun(
        self, request: svc_pb.SteerSubagentRunRequest, context: Ctx
    ) -> svc_pb.SteerSubagentRunResponse:
        _check_run_id(request.run_id, self._registry)
        check_message(request.message)
        run = await self._registry.steer(request.run_id, request.message)
        return svc_pb.SteerSubagentRunResponse(run=run_to_pb(run))


def _check_run_id(run_id: str, registry: SubagentRegistry) -> None:
    if not run_id:
        raise errors.InvalidArgument.field("run_id", "required")
    bounds.check_string(run_id, registry.request_limits.max_id_chars, "run_id")
