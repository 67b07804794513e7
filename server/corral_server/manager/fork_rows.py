"""ForkAgent's rows (docs/design.md#forks): finding the cut in the source's timeline and
copying the rows before it into the fork's own timeline, page by page, as they are read.

The copy keeps each row's item, timestamp, turn id and provider message id; the store gives
it a new seq (from 1) under the fork's new epoch. A tool output kept apart from its row is
copied with it under a new blob id, so the fork's rows never point into the source's outputs.

Must not: change the source (reads only), or publish anything (the fork is not announced yet).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from corral_server import errors
from corral_server.domain.timeline import (
    Cursor,
    Direction,
    TimelineItem,
    TimelineRow,
    ToolCall,
    UserMessage,
)
from corral_server.timeline.store import NewRow, TimelineStore

# A page of the source read and appended at a time: bounded memory whatever the timeline's size.
COPY_PAGE_ROWS = 1_000
# What one FetchToolOutput-like read of a kept-apart output takes.
_OUTPUT_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class CutAt:
    """Where to cut: exactly one of the two is set."""

    message_id: str = ""
    cursor: Cursor | None = None


@dataclass(frozen=True, slots=True)
class Cut:
    """The cut found: `seq` is the first source row the fork leaves out (the timeline's
    `next_seq` when it keeps them all), `row` that row (None at the end)."""

    epoch: str
    seq: int
    row: TimelineRow | None
    copied: int  # rows copied into the fork


def is_cut_row(row: TimelineRow, message_id: str) -> bool:
    """A user message the provider confirmed as `message_id`, or sent or stored under it."""
    item = row.item
    return type(item) is UserMessage and message_id in (
        row.provider_message_id,
        item.message_id,
        item.client_message_id,
    )


async def copy_until_cut(timeline: TimelineStore, source_id: str, fork_id: str, at: CutAt) -> Cut:
    """Copy the source's retained rows before the cut into `fork_id`'s timeline. A cut the
    source lacks is FORK_CUT_NOT_FOUND; a cursor from another epoch or past the timeline's
    end is INVALID_ARGUMENT; a source re-based during the copy is FAILED_PRECONDITION."""
    head = timeline.head(source_id)
    epoch = head.epoch
    end_seq = _checked_cursor(at.cursor, epoch, head.next_seq)
    # From the oldest retained row: retention may have dropped the first ones.
    window = (await timeline.fetch(source_id, Direction.TAIL, None, 1)).window
    cursor = Cursor(epoch, max(window.min_seq - 1, 0))
    copied = 0
    while True:
        page = await timeline.fetch(source_id, Direction.AFTER, cursor, COPY_PAGE_ROWS)
        if page.reset or page.epoch != epoch:  # re-based, or trimmed past the copy
            raise errors.FailedPrecondition(
                f"agent {source_id!r}: its timeline was re-based during the fork; fork again",
                metadata={"agent_id": source_id},
            )
        batch: list[NewRow] = []
        cut: TimelineRow | None = None
        for row in page.rows:
            if (end_seq is not None and row.seq >= end_seq) or (
                at.message_id and is_cut_row(row, at.message_id)
            ):
                cut = row
                break
            batch.append(await _copied(timeline, source_id, row))
        if batch:
            await timeline.append(fork_id, batch)
            copied += len(batch)
        if cut is not None:
            return Cut(epoch, cut.seq, cut, copied)
        if not page.has_newer or not page.rows:
            break
        cursor = Cursor(epoch, page.rows[-1].seq)
    if at.message_id:
        raise errors.ForkCutNotFound(source_id, f"user message {at.message_id!r}")
    return Cut(epoch, timeline.head(source_id).next_seq, None, copied)


def _checked_cursor(cursor: Cursor | None, epoch: str, next_seq: int) -> int | None:
    if cursor is None:
        return None
    if cursor.epoch != epoch:
        raise errors.InvalidArgument.field(
            "cursor.epoch", "the cursor is from another epoch of the agent's timeline"
        )
    if not 1 <= cursor.seq <= next_seq:
        raise errors.InvalidArgument.field(
            "cursor.seq", f"must be 1..{next_seq} (the timeline's next_seq forks it whole)"
        )
    return cursor.seq


async def _copied(timeline: TimelineStore, source_id: str, row: TimelineRow) -> NewRow:
    item: TimelineItem = row.item
    output: bytes | None = None
    if type(item) is ToolCall and item.output_ref is not None:
        ref = item.output_ref
        output = await _output(timeline, source_id, ref.blob_id, ref.size_bytes)
        item = replace(item, output_ref=replace(ref, blob_id=uuid.uuid4().hex))
    return NewRow(item, row.timestamp_ms, row.turn_id, row.provider_message_id, output)


async def _output(timeline: TimelineStore, agent_id: str, blob_id: str, size: int) -> bytes:
    parts: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = await timeline.read_output(agent_id, blob_id, offset, _OUTPUT_CHUNK)
        if not chunk.data:
            break
        parts.append(chunk.data)
        offset += len(chunk.data)
    return b"".join(parts)
