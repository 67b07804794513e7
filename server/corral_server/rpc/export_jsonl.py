"""The JSON Lines export format, both ways: each line one JSON object in protobuf's JSON
mapping (the .proto field names), so the file is lossless and any protobuf library reads it.

    {"format": "corral.export.v1", "agent": {Agent}, "rows": N}      line 1: the header
    {"epoch": E, "seq": "1", "timestamp": ..., "turn_id": ..., "item": {...}, ...}   N rows
    {"end": {"rows": N}}                                              the last line

The header names the row count and the end line repeats it, so a file cut short anywhere
(between lines too) is told apart from a whole one. Parsing is strict: an unknown field, a
wrong type or a missing part is refused with the line's number (`BadImportFile`).

Must not: touch the manager or the store (rpc/export.py and rpc/import_file.py do).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from google.protobuf import json_format

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server import errors

FORMAT = "corral.export.v1"


class Header(NamedTuple):
    agent: agent_pb.Agent
    rows: int


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _dict(msg: Any) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def header_line(agent: agent_pb.Agent, rows: int) -> bytes:
    return _line({"format": FORMAT, "agent": _dict(agent), "rows": rows})


def row_line(epoch: str, row: timeline_pb.TimelineRow) -> bytes:
    return _line({"epoch": epoch, **_dict(row)})


def end_line(rows: int) -> bytes:
    return _line({"end": {"rows": rows}})


def _object(line: bytes, lineno: int) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise errors.BadImportFile(lineno, f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise errors.BadImportFile(lineno, "not a JSON object")
    return obj


def _parse(value: Any, msg: Any, lineno: int, what: str) -> None:
    try:
        json_format.ParseDict(value, msg)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise errors.BadImportFile(lineno, f"{what}: {str(exc)[:200]}") from None


def parse_header(line: bytes) -> Header:
    obj = _object(line, 1)
    if obj.get("format") != FORMAT:
        raise errors.BadImportFile(1, f"not a corral export (no header with format {FORMAT!r})")
    rows = obj.get("rows")
    if set(obj) != {"format", "agent", "rows"} or type(rows) is not int or rows < 0:
        raise errors.BadImportFile(1, "the header holds exactly format, agent and rows (>= 0)")
    agent = agent_pb.Agent()
    _parse(obj["agent"], agent, 1, "agent")
    return Header(agent, rows)


def parse_row(line: bytes, lineno: int) -> tuple[str, timeline_pb.TimelineRow]:
    """(epoch, row) of a row line; BadImportFile for an end line or anything else."""
    obj = _object(line, lineno)
    epoch = obj.pop("epoch", None)
    if not isinstance(epoch, str) or not epoch:
        raise errors.BadImportFile(lineno, "a row line needs its epoch")
    row = timeline_pb.TimelineRow()
    _parse(obj, row, lineno, "row")
    if not row.HasField("item") or row.item.WhichOneof("kind") is None:
        raise errors.BadImportFile(lineno, "a row needs an item of a known kind")
    return epoch, row


def parse_end(line: bytes, lineno: int) -> int | None:
    """The row count of an end line; None when the line is not one."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or set(obj) != {"end"}:
        return None
    end = obj["end"]
    if not isinstance(end, dict) or set(end) != {"rows"} or type(end["rows"]) is not int:
        raise errors.BadImportFile(lineno, 'the end line is {"end": {"rows": N}}')
    return int(end["rows"])
