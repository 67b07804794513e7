"""AgentService.ExportAgent: an agent's header and timeline as a file, streamed in chunks.

The rows are the timeline's retained window as it stood when the export began (rows appended
meanwhile are left for the next export), read a page at a time (at most 2 MiB of rows each)
and sent in chunks of at most CHUNK_BYTES, so neither the daemon nor the client holds the
whole timeline. A timeline re-based under the export (a rewind, a reload with rehydrate)
ends it with FAILED_PRECONDITION / TIMELINE_RESET: export again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from corral.v1 import agent_service_pb2 as svc_pb
from corral_server import errors
from corral_server.domain.agent import Agent
from corral_server.domain.timeline import Cursor, Direction, TimelineRow, TimelineWindow
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds, convert, export_jsonl
from corral_server.rpc.items import row_to_pb
from corral_server.timeline import markdown

# One response's bytes: far under a default client's 4 MiB.
CHUNK_BYTES = 1 << 20
# Rows read and written out per page: JSON costs ~100 us a row (protobuf's json_format), so a
# page holds the loop for ~50 ms at most between two reads in the reader thread.
PAGE_ROWS = 500

_FORMATS = (svc_pb.EXPORT_FORMAT_UNSPECIFIED, svc_pb.EXPORT_FORMAT_JSONL)


async def export_agent(
    manager: AgentManager, request: svc_pb.ExportAgentRequest
) -> AsyncIterator[svc_pb.ExportAgentResponse]:
    bounds.check_string(request.agent_id, manager.limits.max_id_chars, "agent_id")
    if request.format not in (*_FORMATS, svc_pb.EXPORT_FORMAT_MARKDOWN):
        raise errors.InvalidArgument.field("format", f"unknown format {request.format}")
    agent = manager.get(request.agent_id)
    tail = await manager.reads.fetch_timeline(agent.id, Direction.TAIL, None, 1)
    window, epoch = tail.window, tail.epoch
    count = window.max_seq - window.min_seq + 1 if window.max_seq else 0
    if request.format in _FORMATS:
        header_pb = convert.agent_to_pb(agent)
        header_pb.timeline.epoch = epoch
        head = export_jsonl.header_line(header_pb, count)
        end = export_jsonl.end_line(count)

        def line(r: TimelineRow) -> bytes:
            return export_jsonl.row_line(epoch, row_to_pb(r))
    else:
        head = markdown.header(agent, count).encode()
        end = b""

        def line(r: TimelineRow) -> bytes:
            return markdown.row(r).encode()

    out = bytearray(head)
    async for rows in _pages(manager, agent, epoch, window):
        for r in rows:
            out += line(r)
        while len(out) >= CHUNK_BYTES:
            yield svc_pb.ExportAgentResponse(data=bytes(out[:CHUNK_BYTES]))
            del out[:CHUNK_BYTES]
    out += end
    for start in range(0, len(out), CHUNK_BYTES):
        yield svc_pb.ExportAgentResponse(data=bytes(out[start : start + CHUNK_BYTES]))


async def _pages(
    manager: AgentManager, agent: Agent, epoch: str, window: TimelineWindow
) -> AsyncIterator[tuple[TimelineRow, ...]]:
    """The rows min_seq..max_seq of `epoch`, a page at a time."""
    if not window.max_seq:
        return  # an empty timeline
    seq = window.min_seq - 1
    while seq < window.max_seq:
        cursor = Cursor(epoch, seq)
        page = await manager.reads.fetch_timeline(agent.id, Direction.AFTER, cursor, PAGE_ROWS)
        rows = tuple(r for r in page.rows if r.seq <= window.max_seq)
        if page.reset or page.epoch != epoch or not rows or rows[0].seq != seq + 1:
            raise errors.TimelineReset(agent.id)
        seq = rows[-1].seq
        yield rows
