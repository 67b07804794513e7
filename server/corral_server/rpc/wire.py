"""Hand-written protobuf wire encoding for the hottest message: `Event` carrying
`timeline_row_appended`. Every streamed row is encoded once for all subscribers, so this is
the timeline writer's largest per-row cost; building four message objects to serialize them cost
about 3x more than writing the bytes directly.

The output is byte-for-byte what `SerializeToString` produces (proto3: default-valued fields
are omitted, fields in number order); tests/unit/rpc/test_wire.py pins that with hypothesis.
Items other than assistant and reasoning text are serialized by protobuf and embedded.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral_server.domain.timeline import AssistantMessage, Reasoning, TimelineItem, TimelineRow
from corral_server.rpc.items import item_to_pb
from corral_server.timeline.store import NewRow
from corral_server.varint import SMALL_VARINTS as _SMALL
from corral_server.varint import encode_varint as _varint_slow


def varint(value: int) -> bytes:
    if value < 16384:
        return _SMALL[value]
    if value < 2_097_152:  # three bytes: seqs and revisions of a busy daemon
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    if value < 268_435_456:
        return bytes(
            (
                value & 0x7F | 0x80,
                (value >> 7) & 0x7F | 0x80,
                (value >> 14) & 0x7F | 0x80,
                value >> 21,
            )
        )
    return _varint_slow(value)


def _len_field(tag: bytes, payload: bytes) -> bytes:
    n = len(payload)
    return tag + (_SMALL[n] if n < 16384 else varint(n)) + payload


def _str_field(tag: bytes, text: str) -> bytes:
    return _len_field(tag, text.encode()) if text else b""


def item_bytes(item: TimelineItem) -> bytes:
    """A serialized corral.v1.TimelineItem."""
    if type(item) is AssistantMessage:
        # TimelineItem.assistant_message = 2 -> AssistantMessage{text = 1, message_id = 2}
        body = _str_field(b"\x0a", item.text) + _str_field(b"\x12", item.message_id)
        return _len_field(b"\x12", body)
    if type(item) is Reasoning:
        # TimelineItem.reasoning = 3 -> Reasoning{text = 1}
        return _len_field(b"\x1a", _str_field(b"\x0a", item.text))
    return item_to_pb(item).SerializeToString()


_last_timestamp: tuple[int, bytes] = (-1, b"")

# A three-byte varint (2**14 <= value < 2**21: the seqs of a long timeline) as two pieces from
# tables, its low 14 bits (both bytes flagged "more follows") and its top 7: a batch's rows
# take their seq from two lookups instead of a call each.
_LOW14 = tuple(bytes((low & 0x7F | 0x80, low >> 7 | 0x80)) for low in range(1 << 14))
_TOP7 = tuple(bytes((top,)) for top in range(1 << 7))


def _timestamp_field(ms: int) -> bytes:
    """TimelineRow.timestamp = 2 -> Timestamp{seconds = 1, nanos = 2}; rows of a burst share
    their millisecond, so the last one is kept."""
    global _last_timestamp
    if _last_timestamp[0] == ms:
        return _last_timestamp[1]
    seconds, millis = divmod(ms, 1000)
    body = (b"\x08" + varint(seconds) if seconds else b"") + (
        b"\x10" + varint(millis * 1_000_000) if millis else b""
    )
    encoded = _len_field(b"\x12", body)
    _last_timestamp = (ms, encoded)
    return encoded


def row_bytes(row: TimelineRow) -> bytes:
    """A serialized corral.v1.TimelineRow."""
    return b"".join(
        (
            b"\x08" + varint(row.seq) if row.seq else b"",
            _timestamp_field(row.timestamp_ms),
            _str_field(b"\x1a", row.turn_id),
            _len_field(b"\x22", item_bytes(row.item)),
            _str_field(b"\x2a", row.provider_message_id),
        )
    )


_last_prefix: tuple[str, str, bytes] = ("", "", b"")


def _appended_prefix(agent_id: str, epoch: str) -> bytes:
    """TimelineRowAppended's agent_id and epoch fields; the rows of a burst share them, so the
    last pair is kept (as `_timestamp_field` keeps the last timestamp)."""
    global _last_prefix
    last = _last_prefix
    if last[0] == agent_id and last[1] == epoch:
        return last[2]
    encoded = _str_field(b"\x0a", agent_id) + _str_field(b"\x12", epoch)
    _last_prefix = (agent_id, epoch, encoded)
    return encoded


def row_appended_event(revision: int, agent_id: str, epoch: str, row: TimelineRow) -> bytes:
    """A serialized corral.v1.Event{revision, timeline_row_appended{agent_id, epoch, row}}."""
    appended = _appended_prefix(agent_id, epoch) + _len_field(b"\x1a", row_bytes(row))
    head = b"\x08" + varint(revision) if revision else b""
    return head + _len_field(b"\x22", appended)


def row_appended_batch(
    agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
) -> tuple[list[bytes], list[bytes]]:
    """Each row's RowAppended event without its revision (`row_appended_event(0, ...)` of the
    row numbered `first_seq + i`, first_seq >= 1) and each row's item (`item_bytes`), encoding
    every item once for both: the hub streams the first, the store keeps the second (the same
    bytes, inside the first).

    Two loops (the items, then the events around them) with the fields written inline and
    joined once per level: this is the durable writer's largest per-row cost, and a call per
    field cost more than the bytes."""
    items = _encoded_items(rows)
    prefix = _appended_prefix(agent_id, epoch)
    prefix_size = len(prefix) + 1  # and the row's tag
    small, join = _SMALL, b"".join
    bodies: list[bytes] = []
    keep_body = bodies.append
    # The rows of a turn share their turn id, and a burst's rows their millisecond.
    last_turn, turn_field = "", b""
    last_timestamp, timestamp_field = -1, b""
    seq = first_seq
    for (_, timestamp_ms, turn_id, provider_message_id, _), encoded in zip(
        rows, items, strict=True
    ):
        if turn_id != last_turn:
            last_turn, turn_field = turn_id, _str_field(b"\x1a", turn_id)
        if timestamp_ms != last_timestamp:
            last_timestamp, timestamp_field = timestamp_ms, _timestamp_field(timestamp_ms)
        n, pm = len(encoded), provider_message_id.encode()
        m = len(pm)
        if seq < 16384:
            seq_low, seq_top = small[seq], b""
        elif seq < 2_097_152:
            seq_low, seq_top = _LOW14[seq & 0x3FFF], _TOP7[seq >> 14]
        else:
            seq_low, seq_top = varint(seq), b""
        row = join(
            (
                b"\x08",
                seq_low,
                seq_top,
                timestamp_field,
                turn_field,
                b"\x22",
                small[n] if n < 16384 else varint(n),
                encoded,
                b"\x2a" + (small[m] if m < 16384 else varint(m)) + pm if m else b"",
            )
        )
        n = len(row)
        row_head = small[n] if n < 16384 else varint(n)
        n += prefix_size + len(row_head)
        keep_body(
            join((b"\x22", small[n] if n < 16384 else varint(n), prefix, b"\x1a", row_head, row))
        )
        seq += 1
    return bodies, items


def _encoded_items(rows: Sequence[NewRow]) -> list[bytes]:
    """Each row's `item_bytes`, an assistant message with text and id (most rows) inline."""
    small, join = _SMALL, b"".join
    items: list[bytes] = []
    keep_item = items.append
    for row in rows:
        item = row[0]
        if type(item) is AssistantMessage and item.text and item.message_id:
            text, message_id = item.text.encode(), item.message_id.encode()
            n, m = len(text), len(message_id)
            if n < 16384 and m < 16384:
                inner = join((b"\x0a", small[n], text, b"\x12", small[m], message_id))
                n = len(inner)
                keep_item(b"\x12" + (small[n] if n < 16384 else varint(n)) + inner)
                continue
        keep_item(item_bytes(item))
    return items
