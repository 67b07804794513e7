"""Projected entries and pages as corral.v1 messages (docs/design.md#projections)."""

from __future__ import annotations

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_server.rpc.items import cursor_to_pb, item_to_pb, timestamp
from corral_server.timeline.projected_pages import ProjectedPage
from corral_server.timeline.projection import TimelineEntry

_RANGE = timeline_pb.SeqRange


def entry_to_pb(entry: TimelineEntry) -> timeline_pb.TimelineEntry:
    first = timestamp(entry.timestamp_ms)
    return timeline_pb.TimelineEntry(
        seq=entry.seq,
        source_ranges=[_RANGE(start=start, end=end) for start, end in entry.ranges],
        item=item_to_pb(entry.item),
        timestamp=first,
        updated=first if entry.updated_ms == entry.timestamp_ms else timestamp(entry.updated_ms),
        turn_id=entry.turn_id,
        provider_message_id=entry.provider_message_id,
        truncated=entry.truncated,
    )


def page_to_pb(page: ProjectedPage) -> tl_pb.FetchTimelineResponse:
    msg = tl_pb.FetchTimelineResponse(
        epoch=page.epoch,
        reset=page.reset,
        stale_cursor=page.stale_cursor,
        gap=page.gap,
        window=tl_pb.TimelineWindow(
            min_seq=page.window.min_seq,
            max_seq=page.window.max_seq,
            next_seq=page.window.next_seq,
        ),
        has_older=page.has_older,
        has_newer=page.has_newer,
        entries=[entry_to_pb(entry) for entry in page.entries],
    )
    if page.start_cursor is not None:
        msg.start_cursor.CopyFrom(cursor_to_pb(page.start_cursor))
    if page.end_cursor is not None:
        msg.end_cursor.CopyFrom(cursor_to_pb(page.end_cursor))
    return msg


def entry_upserted(
    revision: int, agent_id: str, epoch: str, entry: TimelineEntry, row_seq: int
) -> event_pb.Event:
    return event_pb.Event(
        revision=revision,
        timeline_entry_upserted=event_pb.TimelineEntryUpserted(
            agent_id=agent_id, epoch=epoch, entry=entry_to_pb(entry), row_seq=row_seq
        ),
    )
