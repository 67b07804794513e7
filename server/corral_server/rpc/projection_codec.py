"""Projected entries and pages as corral.v1 messages (docs/design.md#projections)."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.rpc.items import item_into
from corral_server.timeline.projection import TimelineEntry


def entry_to_pb(entry: TimelineEntry) -> timeline_pb.TimelineEntry:
    msg = timeline_pb.TimelineEntry()
    entry_into(msg, entry)
    return msg


def entry_into(msg: timeline_pb.TimelineEntry, entry: TimelineEntry) -> None:
    """`entry` written into `msg` (a fresh TimelineEntry, say a page's `entries.add()`) in
    place: building each part apart and copying it in costs about a quarter more (measured
    over 200-entry pages)."""
    msg.seq = entry.seq
    item_into(msg.item, entry.item)
    msg.turn_id, msg.provider_message_id = entry.turn_id, entry.provider_message_id
    msg.truncated = entry.truncated
    add = msg.source_ranges.add
    for start, end in entry.ranges:
        add(start=start, end=end)
    _set_ms(msg.timestamp, entry.timestamp_ms)
    _set_ms(msg.updated, entry.updated_ms)


def _set_ms(ts: Timestamp, ms: int) -> None:
    ts.seconds, ts.nanos = ms // 1000, (ms % 1000) * 1_000_000


def entry_upserted(
    revision: int, agent_id: str, epoch: str, entry: TimelineEntry, row_seq: int
) -> event_pb.Event:
    return event_pb.Event(
        revision=revision,
        timeline_entry_upserted=event_pb.TimelineEntryUpserted(
            agent_id=agent_id, epoch=epoch, entry=entry_to_pb(entry), row_seq=row_seq
        ),
    )
