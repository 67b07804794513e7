"""Projected entries and pages as corral.v1 messages (docs/design.md#projections)."""

from __future__ import annotations

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.rpc.items import item_to_pb, timestamp
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


def entry_upserted(
    revision: int, agent_id: str, epoch: str, entry: TimelineEntry, row_seq: int
) -> event_pb.Event:
    return event_pb.Event(
        revision=revision,
        timeline_entry_upserted=event_pb.TimelineEntryUpserted(
            agent_id=agent_id, epoch=epoch, entry=entry_to_pb(entry), row_seq=row_seq
        ),
    )
