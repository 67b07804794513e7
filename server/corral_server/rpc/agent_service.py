"""corral.v1.AgentService: translates requests to manager calls and results back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import agent_service_pb2_grpc as svc_grpc
from corral_server import errors
from corral_server.domain.agent import Agent
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import AgentUpdate, ListQuery
from corral_server.rpc import bounds, convert
from corral_server.rpc.create_codec import spec_from_pb
from corral_server.rpc.errors import Ctx, streaming, unary
from corral_server.rpc.export import export_agent
from corral_server.rpc.fork import fork_agent
from corral_server.rpc.import_file import import_agent_export
from corral_server.rpc.usage import get_usage
from corral_server.rpc.workspace_codec import release_to_pb
from corral_server.workspace.worktrees import Worktrees

_UPDATABLE = ("title", "labels", "mode", "model")
# A selector is at most max_labels terms of a key and a value: 64 * (256 + 256 + 2) < 64 K.
_MAX_SELECTOR_CHARS = 65_536
# A ListAgents page ends early, before this many bytes of agents: 100 agents with every label
# at its limit are 13 MB, past a default client's 4 MiB receive limit. One agent alone is far
# below it (queued prompts and pending permissions are summaries), so a page holds one at least.
MAX_PAGE_BYTES = 3 << 20
ReloadOn = Callable[[str, bool, str], Awaitable[Agent]]


class AgentService(svc_grpc.AgentServiceServicer):
    def __init__(
        self,
        manager: AgentManager,
        worktrees: Worktrees | None = None,
        reload_on: ReloadOn | None = None,
    ) -> None:
        self._manager = manager
        self._worktrees = worktrees or Worktrees()
        # A cluster node's ReloadAgent (cluster/relocation.py): agent, rehydrate, node.
        self._reload_on = reload_on

    @unary
    async def CreateAgent(
        self, request: svc_pb.CreateAgentRequest, context: Ctx
    ) -> svc_pb.CreateAgentResponse:
        limits = self._manager.limits
        bounds.check_content(request.initial_prompt, limits, "initial_prompt")
        bounds.check_labels(request.labels, limits)
        for field in ("provider", "model", "mode", "request_id"):
            bounds.check_string(getattr(request, field), limits.max_id_chars, field)
        bounds.check_string(request.title, limits.max_title_chars, "title")
        prompt = convert.prompt_from_pb(list(request.initial_prompt))
        spec = spec_from_pb(request, prompt, request.request_id)
        agent, turn_id = await self._manager.create(spec)
        return svc_pb.CreateAgentResponse(agent=convert.agent_to_pb(agent), turn_id=turn_id)

    @unary
    async def GetUsage(
        self, request: svc_pb.GetUsageRequest, context: Ctx
    ) -> svc_pb.GetUsageResponse:
        return await get_usage(self._manager, request)

    @streaming
    async def ExportAgent(
        self, request: svc_pb.ExportAgentRequest, context: Ctx
    ) -> AsyncIterator[svc_pb.ExportAgentResponse]:
        async for chunk in export_agent(self._manager, request):
            yield chunk

    @unary
    async def ImportAgentExport(
        self, request: AsyncIterator[svc_pb.ImportAgentExportRequest], context: Ctx
    ) -> svc_pb.ImportAgentExportResponse:
        return await import_agent_export(self._manager, request)

    @unary
    async def ForkAgent(
        self, request: svc_pb.ForkAgentRequest, context: Ctx
    ) -> svc_pb.ForkAgentResponse:
        return await fork_agent(self._manager, request)

    @unary
    async def GetAgent(
        self, request: svc_pb.GetAgentRequest, context: Ctx
    ) -> svc_pb.GetAgentResponse:
        return svc_pb.GetAgentResponse(
            agent=convert.agent_to_pb(self._manager.get(request.agent_id))
        )

    @unary
    async def ListAgents(
        self, request: svc_pb.ListAgentsRequest, context: Ctx
    ) -> svc_pb.ListAgentsResponse:
        limits = self._manager.limits
        bounds.check_string(request.label_selector, _MAX_SELECTOR_CHARS, "label_selector")
        bounds.check_string(request.page_token, limits.max_id_chars, "page_token")
        bounds.check_string(request.parent_agent_id, limits.max_id_chars, "parent_agent_id")
        query = ListQuery(
            page_size=request.page_size,
            page_token=request.page_token,
            label_selector=request.label_selector,
            include_archived=request.include_archived,
            parent_agent_id=request.parent_agent_id,
        )
        agents, token = self._manager.directory.page(query)
        page: list[agent_pb.Agent] = []
        size = 0
        for agent in agents:
            msg = convert.agent_to_pb(agent)
            size += msg.ByteSize() + 8  # the repeated field's tag and length
            if page and size > MAX_PAGE_BYTES:
                token = page[-1].id  # the rest is the next page's
                break
            page.append(msg)
        return svc_pb.ListAgentsResponse(agents=page, next_page_token=token)

    @unary
    async def UpdateAgent(
        self, request: svc_pb.UpdateAgentRequest, context: Ctx
    ) -> svc_pb.UpdateAgentResponse:
        limits = self._manager.limits
        bounds.check_labels(request.labels, limits)
        if len(request.update_mask.paths) > len(_UPDATABLE):
            raise errors.InvalidArgument.field(
                "update_mask", f"at most {len(_UPDATABLE)} paths: {', '.join(_UPDATABLE)}"
            )
        for field in ("model", "mode"):
            bounds.check_string(getattr(request, field), limits.max_id_chars, field)
        bounds.check_string(request.title, limits.max_title_chars, "title")
        paths = list(request.update_mask.paths)
        unknown = [p for p in paths if p not in _UPDATABLE]
        if unknown:
            raise errors.InvalidArgument.field(
                "update_mask", f"unknown paths {unknown}; updatable: {', '.join(_UPDATABLE)}"
            )
        if not paths:  # no mask: every field that was given
            paths = [p for p in ("title", "mode", "model") if getattr(request, p)]
            if request.labels:
                paths.append("labels")
        change = AgentUpdate(
            title=request.title if "title" in paths else None,
            labels=dict(request.labels) if "labels" in paths else None,
            mode=request.mode if "mode" in paths else None,
            model=request.model if "model" in paths else None,
        )
        agent = await self._manager.update(request.agent_id, change)
        return svc_pb.UpdateAgentResponse(agent=convert.agent_to_pb(agent))

    @unary
    async def ReloadAgent(
        self, request: svc_pb.ReloadAgentRequest, context: Ctx
    ) -> svc_pb.ReloadAgentResponse:
        bounds.check_string(request.node, self._manager.limits.max_id_chars, "node")
        if self._reload_on is not None:
            agent = await self._reload_on(
                request.agent_id, request.rehydrate_from_disk, request.node
            )
        elif request.node:
            raise errors.InvalidArgument.field("node", "this daemon is not a cluster node")
        else:
            agent = await self._manager.reload(request.agent_id, request.rehydrate_from_disk)
        return svc_pb.ReloadAgentResponse(agent=convert.agent_to_pb(agent))

    @unary
    async def ImportAgent(
        self, request: svc_pb.ImportAgentRequest, context: Ctx
    ) -> svc_pb.ImportAgentResponse:
        limits = self._manager.limits
        for field in ("provider", "provider_session_id"):
            bounds.check_string(getattr(request, field), limits.max_id_chars, field)
        agent = await self._manager.creation.import_agent(
            request.provider, request.provider_session_id, request.cwd
        )
        return svc_pb.ImportAgentResponse(agent=convert.agent_to_pb(agent))

    @unary
    async def CloseAgent(
        self, request: svc_pb.CloseAgentRequest, context: Ctx
    ) -> svc_pb.CloseAgentResponse:
        agent = await self._manager.close(request.agent_id)
        return svc_pb.CloseAgentResponse(agent=convert.agent_to_pb(agent))

    @unary
    async def ArchiveAgent(
        self, request: svc_pb.ArchiveAgentRequest, context: Ctx
    ) -> svc_pb.ArchiveAgentResponse:
        archived = await self._manager.archive(request.agent_id)
        released = await self._worktrees.release_all(map(self._manager.get, archived))
        return svc_pb.ArchiveAgentResponse(
            archived_agent_ids=archived, workspaces=[release_to_pb(r) for r in released]
        )

    @unary
    async def DetachAgent(
        self, request: svc_pb.DetachAgentRequest, context: Ctx
    ) -> svc_pb.DetachAgentResponse:
        agent = await self._manager.detach(request.agent_id)
        return svc_pb.DetachAgentResponse(agent=convert.agent_to_pb(agent))

    @unary
    async def ClearAttention(
        self, request: svc_pb.ClearAttentionRequest, context: Ctx
    ) -> svc_pb.ClearAttentionResponse:
        bounds.check_ids(request.agent_ids, self._manager.limits, "agent_ids")
        agents = await self._manager.clear_attention(list(request.agent_ids))
        return svc_pb.ClearAttentionResponse(agents=[convert.agent_to_pb(a) for a in agents])

    @unary
    async def ListProviders(
        self, request: svc_pb.ListProvidersRequest, context: Ctx
    ) -> svc_pb.ListProvidersResponse:
        providers = [
            svc_pb.Provider(
                name=p.name,
                kind=p.kind,
                available=p.available,
                unavailable_reason=p.unavailable_reason,
                modes=[
                    svc_pb.ProviderMode(id=m.id, label=m.label, description=m.description)
                    for m in p.modes
                ],
                models=[svc_pb.ProviderModel(id=m.id, label=m.label) for m in p.models],
                can_steer=p.can_steer,
            )
            for p in self._manager.providers_info()
        ]
        return svc_pb.ListProvidersResponse(providers=providers)


__all__ = ["AgentService", "agent_pb"]
