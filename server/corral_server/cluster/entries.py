"""What one event of a batch in the stream is (docs/cluster.md#read-model): a kind byte, then
its fields. Everything a node needs to build its read model and to take an agent over:

    T  timeline made   the epoch (the owner minted it; every node's timeline takes it)
    B  timeline rebased the new epoch
    X  timeline dropped
    R  a row           seq, timestamp, turn id, provider message id, the item as the timeline
                       store encodes it, the kept tool output (if any)
    P  a row's provider message id set   seq, the id
    E  an event        the corral.v1.Event body without its revision (the hub numbers it)
    A  agent record    the agent in the storage format (store/format/agents.py): the public
                       agent and its private state (the provider session id)
    D  record deleted

Every value a node computes while applying comes from here (epochs, seqs, times), never from
the node itself, so every node's read model is the same.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from corral_server.domain.timeline import TimelineItem
from corral_server.timeline.store import NewRow

_ROW = struct.Struct(">QQIIIB")  # seq, timestamp, turn, message id, item lengths, has output
_SEQ = struct.Struct(">Q")
_ROW_UNPACK = _ROW.unpack_from
_ROW_END = 1 + _ROW.size  # the kind byte and the fixed fields


@dataclass(frozen=True, slots=True)
class RowEntry:
    seq: int
    timestamp_ms: int
    turn_id: str
    provider_message_id: str
    item: bytes
    output: bytes | None


# A row entry as its writer had it before encoding: seq, the row, the encoded item (the owner's
# own follower applies it from this, log.py `Batch.rows`).
SentRow = tuple[int, NewRow, bytes]


def epoch_entry(kind: bytes, epoch: str) -> bytes:
    return kind + epoch.encode()


def row_entry(seq: int, row: NewRow, item: bytes) -> bytes:
    turn, message = row.turn_id.encode(), row.provider_message_id.encode()
    output = row.output
    head = _ROW.pack(seq, row.timestamp_ms, len(turn), len(message), len(item), output is not None)
    return b"".join((b"R", head, turn, message, item, output or b""))


def read_row(entry: bytes) -> RowEntry:
    seq, timestamp, turn, message, item, has_output = _ROW.unpack_from(entry, 1)
    at = 1 + _ROW.size
    turn_id = entry[at : at + turn].decode()
    at += turn
    message_id = entry[at : at + message].decode()
    at += message
    item_bytes = entry[at : at + item]
    at += item
    return RowEntry(
        seq, timestamp, turn_id, message_id, item_bytes, entry[at:] if has_output else None
    )


_new_tuple = tuple.__new__  # a NamedTuple's own __new__ is a Python function; the tuple's is C
_last_turn: list[object] = [b"", ""]  # the last turn id read, as bytes and str (a turn's rows)


def read_new_row(entry: bytes, item: TimelineItem) -> SentRow:
    """`read_row` on the follower's hot path: the seq, the row to append (with `item` standing
    in for the item, which the caller decodes only when the store needs it) and the encoded
    item, in a third of `read_row`'s time (no dataclass, a turn's id decoded once)."""
    seq, timestamp, turn, message, item_size, has_output = _ROW_UNPACK(entry, 1)
    at = _ROW_END + turn
    turn_bytes = entry[_ROW_END:at]
    if turn_bytes == _last_turn[0]:
        turn_id = _last_turn[1]
    else:
        turn_id = turn_bytes.decode()
        _last_turn[:] = [turn_bytes, turn_id]
    end = at + message
    message_id = entry[at:end].decode()
    item_end = end + item_size
    output = entry[item_end:] if has_output else None
    row = _new_tuple(NewRow, (item, timestamp, turn_id, message_id, output))
    return seq, row, entry[end:item_end]


def message_id_entry(seq: int, provider_message_id: str) -> bytes:
    return b"P" + _SEQ.pack(seq) + provider_message_id.encode()


def read_message_id(entry: bytes) -> tuple[int, str]:
    (seq,) = _SEQ.unpack_from(entry, 1)
    return seq, entry[1 + _SEQ.size :].decode()


def event_entry(body: bytes) -> bytes:
    return b"E" + body


def record_entry(record: bytes) -> bytes:
    return b"A" + record


DROPPED = b"X"
DELETED = b"D"
