"""corral.v1.TimelineService: pages with receipts, and the activity digest."""

from __future__ import annotations

from collections.abc import Awaitable

from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral_server import errors
from corral_server.domain.timeline import Cursor, Direction, FetchResult
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds, convert
from corral_server.rpc.errors import Ctx, unary
from corral_server.rpc.projection_codec import entry_into
from corral_server.rpc.timeline_search import search_timeline
from corral_server.store.search import SearchIndex
from corral_server.timeline.activity import MAX_ACTIVITY_CHARS
from corral_server.timeline.projected_pages import ProjectedPage, fetch_projected

# FetchToolOutput's chunk when the request sets no limit, and the most it answers: 3 MiB of
# data and a few bytes of framing stay under a default client's 4 MiB receive limit.
DEFAULT_OUTPUT_CHUNK = 1024 * 1024
MAX_OUTPUT_CHUNK = 3 * 1024 * 1024

_DIRECTION = {
    tl_pb.TIMELINE_DIRECTION_UNSPECIFIED: Direction.TAIL,
    tl_pb.TIMELINE_DIRECTION_TAIL: Direction.TAIL,
    tl_pb.TIMELINE_DIRECTION_BEFORE: Direction.BEFORE,
    tl_pb.TIMELINE_DIRECTION_AFTER: Direction.AFTER,
}

_VIEWS = frozenset(timeline_pb.TimelineView.values())


def receipt_to_pb(result: FetchResult) -> tl_pb.FetchTimelineResponse:
    msg = tl_pb.FetchTimelineResponse(
        epoch=result.epoch,
        reset=result.reset,
        stale_cursor=result.stale_cursor,
        gap=result.gap,
        window=tl_pb.TimelineWindow(
            min_seq=result.window.min_seq,
            max_seq=result.window.max_seq,
            next_seq=result.window.next_seq,
        ),
        has_older=result.has_older,
        has_newer=result.has_newer,
        rows=[convert.row_to_pb(row) for row in result.rows],
    )
    if result.start_cursor is not None:
        msg.start_cursor.CopyFrom(convert.cursor_to_pb(result.start_cursor))
    if result.end_cursor is not None:
        msg.end_cursor.CopyFrom(convert.cursor_to_pb(result.end_cursor))
    return msg


def page_to_pb(page: ProjectedPage) -> tl_pb.FetchTimelineResponse:
    """A projected receipt: the raw one's fields, entries for rows, cursors of entries."""
    msg = receipt_to_pb(page.receipt)
    add = msg.entries.add
    for entry in page.entries:
        entry_into(add(), entry)
    if page.start_cursor is not None and page.end_cursor is not None:
        msg.start_cursor.CopyFrom(convert.cursor_to_pb(page.start_cursor))
        msg.end_cursor.CopyFrom(convert.cursor_to_pb(page.end_cursor))
    return msg


class TimelineService(tl_grpc.TimelineServiceServicer):
    def __init__(self, manager: AgentManager, search: SearchIndex | None = None) -> None:
        self._manager = manager
        self._search = search  # None: no state directory, no index

    def _check_ids(self, agent_id: str, epoch: str, epoch_field: str) -> None:
        max_chars = self._manager.limits.max_id_chars
        bounds.check_string(agent_id, max_chars, "agent_id")
        bounds.check_string(epoch, max_chars, epoch_field)

    @unary
    async def FetchTimeline(
        self, request: tl_pb.FetchTimelineRequest, context: Ctx
    ) -> tl_pb.FetchTimelineResponse:
        self._check_ids(request.agent_id, request.cursor.epoch, "cursor.epoch")
        direction = _DIRECTION.get(request.direction)
        if direction is None:
            raise errors.InvalidArgument.field("direction", f"unknown value {request.direction}")
        cursor = convert.cursor_from_pb(request.cursor) if request.HasField("cursor") else None
        if cursor is not None and direction is not Direction.TAIL and not cursor.epoch:
            raise errors.InvalidArgument.field("cursor.epoch", "required")
        limit = request.limit if request.HasField("limit") else None
        view = request.view
        if view not in _VIEWS:
            raise errors.InvalidArgument.field("view", f"unknown value {view}")
        if view == timeline_pb.TIMELINE_VIEW_PROJECTED:
            agent_id = request.agent_id

            def fetch(d: Direction, c: Cursor | None, n: int | None) -> Awaitable[FetchResult]:
                return self._manager.reads.fetch_timeline(agent_id, d, c, n)

            return page_to_pb(await fetch_projected(fetch, direction, cursor, limit))
        result = await self._manager.reads.fetch_timeline(
            request.agent_id, direction, cursor, limit
        )
        return receipt_to_pb(result)

    @unary
    async def GetActivity(
        self, request: tl_pb.GetActivityRequest, context: Ctx
    ) -> tl_pb.GetActivityResponse:
        self._check_ids(request.agent_id, request.start_cursor.epoch, "start_cursor.epoch")
        self._check_ids(request.agent_id, request.end_cursor.epoch, "end_cursor.epoch")
        # Answer at most MAX_ACTIVITY_CHARS (the text then fits any client); `truncated` says
        # when older rows were left out, as for any other budget.
        max_chars = min(request.max_chars, MAX_ACTIVITY_CHARS)
        start = (
            convert.cursor_from_pb(request.start_cursor)
            if request.HasField("start_cursor")
            else None
        )
        end = convert.cursor_from_pb(request.end_cursor) if request.HasField("end_cursor") else None
        digest = await self._manager.reads.activity(request.agent_id, start, end, max_chars)
        msg = tl_pb.GetActivityResponse(text=digest.text, truncated=digest.truncated)
        epoch = self._manager.get(request.agent_id).epoch
        if digest.first_seq:
            msg.start_cursor.CopyFrom(convert.cursor_to_pb(Cursor(epoch, digest.first_seq)))
            msg.end_cursor.CopyFrom(convert.cursor_to_pb(Cursor(epoch, digest.last_seq)))
        return msg

    @unary
    async def FetchToolOutput(
        self, request: tl_pb.FetchToolOutputRequest, context: Ctx
    ) -> tl_pb.FetchToolOutputResponse:
        self._check_ids(request.agent_id, request.blob_id, "blob_id")
        blob_id = request.blob_id
        if request.HasField("cursor"):
            blob_id = await self._output_at(request)
        elif not blob_id:
            raise errors.InvalidArgument.field("blob_id", "required (or a cursor)")
        limit = min(request.limit or DEFAULT_OUTPUT_CHUNK, MAX_OUTPUT_CHUNK)
        chunk = await self._manager.reads.fetch_tool_output(
            request.agent_id, blob_id, request.offset, limit
        )
        return tl_pb.FetchToolOutputResponse(
            data=chunk.data, offset=chunk.offset, size_bytes=chunk.size_bytes, json=chunk.json
        )

    async def _output_at(self, request: tl_pb.FetchToolOutputRequest) -> str:
        self._check_ids(request.agent_id, request.cursor.epoch, "cursor.epoch")
        if request.blob_id:
            raise errors.InvalidArgument.field("cursor", "give a blob_id or a cursor, not both")
        if request.cursor.seq < 1:
            raise errors.InvalidArgument.field("cursor.seq", "a row's seq is at least 1")
        cursor = convert.cursor_from_pb(request.cursor)
        return await self._manager.reads.tool_output_id(request.agent_id, cursor)

    @unary
    async def SearchTimeline(
        self, request: tl_pb.SearchTimelineRequest, context: Ctx
    ) -> tl_pb.SearchTimelineResponse:
        return await search_timeline(self._manager, self._search, request)
