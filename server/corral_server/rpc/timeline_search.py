"""TimelineService.SearchTimeline: the request checked and scoped, the store's index asked.

The agents searched are resolved here, in memory, from the manager's snapshots (labels,
providers, archived or not); the store filters its hits by their ids. A page token carries the
offset of the next page and a fingerprint of the request, so a token used with another query
is refused instead of paging something else. Paging is by offset over the ranked hits: rows
committed between two pages can shift hits across the page boundary.
"""

from __future__ import annotations

from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_server import errors
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds, page_tokens
from corral_server.rpc.items import timestamp
from corral_server.rpc.scope import agents_in_scope, time_range
from corral_server.store.search import SearchHit, SearchIndex, SearchQuery
from corral_server.store.search_text import KIND_NAMES

MAX_QUERY_CHARS = 1000
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
# Deeper pages cost the reader more (an offset); past this, narrow the query instead.
MAX_OFFSET = 10_000

NO_STATE_DIR = (
    "search needs the durable store: start the daemon with --state-dir "
    "(an in-memory daemon keeps no index)"
)


async def search_timeline(
    manager: AgentManager, index: SearchIndex | None, request: tl_pb.SearchTimelineRequest
) -> tl_pb.SearchTimelineResponse:
    query = _checked(manager, request)
    if index is None:
        raise errors.Unimplemented(NO_STATE_DIR)
    if not index.enabled:
        raise errors.SearchIndexOff()
    # Read before the query: a background indexing that ends while the query runs must not
    # let a page that missed its last rows say that nothing is missing.
    indexing = index.indexing
    hits, more = await index.search(query)
    response = tl_pb.SearchTimelineResponse(
        hits=[_hit_to_pb(hit) for hit in hits], indexing=indexing
    )
    if more and query.offset + query.limit <= MAX_OFFSET:
        response.next_page_token = page_tokens.token(query.offset + query.limit, request)
    return response


def _checked(manager: AgentManager, request: tl_pb.SearchTimelineRequest) -> SearchQuery:
    text = request.query
    if not text.strip():
        raise errors.InvalidArgument.field("query", "required")
    bounds.check_string(text, MAX_QUERY_CHARS, "query")
    limits = manager.limits
    bounds.check_ids(request.agent_ids, limits, "agent_ids")
    bounds.check_ids(request.providers, limits, "providers")
    bounds.check_ids(request.item_kinds, limits, "item_kinds")
    bounds.check_string(request.label_selector, MAX_QUERY_CHARS, "label_selector")
    for i, kind in enumerate(request.item_kinds):
        if kind not in KIND_NAMES:
            known = ", ".join(sorted(KIND_NAMES))
            raise errors.InvalidArgument.field(
                f"item_kinds[{i}]", f"unknown kind {kind!r} ({known})"
            )
    size = request.page_size or DEFAULT_PAGE_SIZE
    if size > MAX_PAGE_SIZE:
        raise errors.InvalidArgument.field("page_size", f"at most {MAX_PAGE_SIZE}, got {size}")
    start, end = time_range(request)
    offset = page_tokens.offset(request.page_token, request, MAX_OFFSET)
    return SearchQuery(
        query=text,
        agent_ids=agents_in_scope(
            manager,
            label_selector=request.label_selector,
            agent_ids=request.agent_ids,
            providers=request.providers,
            include_archived=request.include_archived,
        ),
        kinds=frozenset(request.item_kinds) or None,
        start_ms=start,
        end_ms=end,
        offset=offset,
        limit=size,
    )


def _hit_to_pb(hit: SearchHit) -> tl_pb.SearchHit:
    return tl_pb.SearchHit(
        agent_id=hit.agent_id,
        cursor=timeline_pb.Cursor(epoch=hit.cursor.epoch, seq=hit.cursor.seq),
        item_kind=hit.kind,
        timestamp=timestamp(hit.timestamp_ms),
        snippet=hit.snippet,
        score=hit.score,
    )
