"""AgentService.GetUsage: the request checked and scoped, the usage book asked, the groups
answered a page at a time
(rpc/page_tokens.py).

The agents counted are resolved here, in memory, from the manager's snapshots (labels,
providers; archived agents count: what they spent stays spent).
"""

from __future__ import annotations

from corral.v1 import agent_service_pb2 as svc_pb
from corral_server import errors
from corral_server.domain.agent import Usage
from corral_server.domain.usage import GroupBy, UsageGroup, UsageQuery, add
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds, page_tokens
from corral_server.rpc.convert import usage_to_pb
from corral_server.rpc.scope import agents_in_scope, time_range

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
MAX_SELECTOR_CHARS = 65_536

_GROUP_BY = {
    svc_pb.USAGE_GROUP_BY_AGENT: GroupBy.AGENT,
    svc_pb.USAGE_GROUP_BY_PROVIDER: GroupBy.PROVIDER,
    svc_pb.USAGE_GROUP_BY_MODEL: GroupBy.MODEL,
    svc_pb.USAGE_GROUP_BY_DAY: GroupBy.DAY,
}


async def get_usage(
    manager: AgentManager, request: svc_pb.GetUsageRequest
) -> svc_pb.GetUsageResponse:
    query, size = _checked(manager, request)
    offset = page_tokens.offset(request.page_token, request)
    groups = await manager.usage.query(query)
    total, turns = Usage(), 0
    for g in groups:
        total, turns = add(total, g.usage), turns + g.turns
    page = groups[offset : offset + size]
    response = svc_pb.GetUsageResponse(
        groups=[_group_to_pb(g) for g in page], total=usage_to_pb(total), turns=turns
    )
    if offset + size < len(groups):
        response.next_page_token = page_tokens.token(offset + size, request)
    return response


def _checked(manager: AgentManager, request: svc_pb.GetUsageRequest) -> tuple[UsageQuery, int]:
    limits = manager.limits
    bounds.check_ids(request.agent_ids, limits, "agent_ids")
    bounds.check_ids(request.providers, limits, "providers")
    bounds.check_string(request.label_selector, MAX_SELECTOR_CHARS, "label_selector")
    bounds.check_string(request.page_token, limits.max_id_chars, "page_token")
    by: set[GroupBy] = set()
    for i, value in enumerate(request.group_by):
        if value not in _GROUP_BY:
            raise errors.InvalidArgument.field(
                f"group_by[{i}]", f"unknown value {value} (AGENT, PROVIDER, MODEL or DAY)"
            )
        by.add(_GROUP_BY[value])
    size = request.page_size or DEFAULT_PAGE_SIZE
    if size > MAX_PAGE_SIZE:
        raise errors.InvalidArgument.field("page_size", f"at most {MAX_PAGE_SIZE}, got {size}")
    start, end = time_range(request)
    scope = agents_in_scope(
        manager,
        label_selector=request.label_selector,
        agent_ids=request.agent_ids,
        providers=request.providers,
        include_archived=True,
    )
    return UsageQuery(scope, start, end, frozenset(by)), size


def _group_to_pb(g: UsageGroup) -> svc_pb.UsageGroup:
    return svc_pb.UsageGroup(
        agent_id=g.agent_id,
        provider=g.provider,
        model=g.model,
        day=g.day,
        usage=usage_to_pb(g.usage),
        turns=g.turns,
    )
