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
from corral_server.manager.selector import parse_selector
from corral_server.rpc import bounds, page_tokens
from corral_server.rpc.convert import usage_to_pb
from corral_server.rpc.items import timestamp_ms

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
    start = timestamp_ms(request.start_time) if request.HasField("start_time") else None
    end = timestamp_ms(request.end_time) if request.HasField("end_time") else None
    if start is not None and end is not None and end <= start:
        raise errors.InvalidArgument.field("end_time", "must be after start_time")
    return UsageQuery(_scope(manager, request), start, end, frozenset(by)), size


def _scope(manager: AgentManager, request: svc_pb.GetUsageRequest) -> frozenset[str] | None:
    """The ids of the agents counted; None = every agent (nothing narrows the query)."""
    selector = parse_selector(request.label_selector)
    for agent_id in request.agent_ids:
        manager.get(agent_id)  # NOT_FOUND for an unknown agent, as everywhere
    if not request.label_selector.strip() and not request.agent_ids and not request.providers:
        return None
    wanted_ids = frozenset(request.agent_ids)
    providers = frozenset(request.providers)
    return frozenset(
        agent.id
        for agent in manager.agents()
        if (not wanted_ids or agent.id in wanted_ids)
        and (not providers or agent.provider in providers)
        and selector.matches(agent.labels)
    )


def _group_to_pb(g: UsageGroup) -> svc_pb.UsageGroup:
    return svc_pb.UsageGroup(
        agent_id=g.agent_id,
        provider=g.provider,
        model=g.model,
        day=g.day,
        usage=usage_to_pb(g.usage),
        turns=g.turns,
    )
