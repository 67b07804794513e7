"""What the CLI prints: the console (text or `--json` lines), timeline rows as live turn output
or as log lines, agent states and the agent table.

Text goes to stdout only when it is the command's answer (a reply, a row, a table); progress,
notes and errors go to stderr, so `corral run ... > reply.txt` captures just the reply. With
`--json` stdout carries only JSON lines and stderr only errors: the human notes are left out.
Every write is flushed: output is live, also through a pipe.

Must not: call the daemon.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TextIO

from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import turn_service_pb2 as turn_pb

_STATE_WIDTH = 20  # of the state column in `ls`
_PREVIEW_WIDTH = 40  # of a queued prompt's text, on its line


@dataclass
class Console:
    """Where output goes. `json` switches answers to one JSON object per line and silences
    the notes (errors are still said)."""

    json: bool = False
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def line(self, text: str) -> None:
        _write_line(self.out, text)

    def note(self, text: str) -> None:
        """A human line on stderr (progress, ids, turn boundaries): not with --json."""
        if not self.json:
            _write_line(self.err, text)

    def error(self, text: str) -> None:
        """A failure on stderr, with --json too (the exit code alone says too little)."""
        _write_line(self.err, text)

    def message(self, msg: Message) -> None:
        """One protobuf message as one JSON line, with the .proto field names (as grpcurl and
        the Node client print them) and enum values by name."""
        as_dict = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        self.line(json.dumps(as_dict, ensure_ascii=False))


def _write_line(stream: TextIO, text: str) -> None:
    # One write per line (print writes the text and the newline apart), so lines from commands
    # run on several threads of one process never interleave within a line.
    stream.write(text + "\n")
    stream.flush()


def local_time(ts: Timestamp, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return datetime.fromtimestamp(ts.ToMilliseconds() / 1000).strftime(fmt)


def one_line(text: str) -> str:
    return " ↵ ".join(text.splitlines())


def tool_status(value: int) -> str:
    """`TOOL_CALL_STATUS_COMPLETED` -> `completed` (the number when the name is unknown)."""
    found = timeline_pb.ToolCallStatus.DESCRIPTOR.values_by_number.get(value)
    return found.name.removeprefix("TOOL_CALL_STATUS_").lower() if found else str(value)


# --- agents ------------------------------------------------------------------------------


def state_name(agent: agent_types_pb.Agent) -> str:
    return agent.lifecycle.WhichOneof("state") or "unknown"


def state_label(agent: agent_types_pb.Agent) -> str:
    """The lifecycle's name, with the turn for `running` and the error for `errored`."""
    name = state_name(agent)
    if name == "running":
        turn = agent.lifecycle.running.active_turn_id
        return f"running {turn}" if turn else "running"  # ids are whole, never cut
    if name == "errored":
        return f"errored: {one_line(agent.lifecycle.errored.error.message)}"
    return name


def permission_asked(agent_id: str, permission: agent_types_pb.PendingPermission) -> str:
    """A pending permission, and how to answer it."""
    title = f" {one_line(permission.title)}" if permission.title else ""
    return (
        f"⏸ permission requested: {permission.name}{title} (id {permission.id}); "
        f"answer with: corral permit {agent_id} [--deny] {permission.id}"
    )


def permission_ended(resolved: turn_pb.PermissionResolved) -> str:
    if resolved.canceled or resolved.behavior == turn_pb.PERMISSION_BEHAVIOR_UNSPECIFIED:
        how = "ended unanswered"
    elif resolved.behavior == turn_pb.PERMISSION_BEHAVIOR_ALLOW:
        how = "allowed"
    else:
        how = "denied"
    return f"permission {resolved.request_id} {how}"


def queued_line(q: agent_types_pb.QueuedPrompt) -> str:
    """A queued prompt's summary: id, when, by what, size, and the start of its text."""
    size = f"{q.chars} chars" + (f", {q.image_count} image(s)" if q.image_count else "")
    text = one_line(q.preview)
    preview = _clip(text, _PREVIEW_WIDTH) if len(text) > _PREVIEW_WIDTH else text
    if q.clipped and not preview.endswith("…"):
        preview += "…"
    by = q.queued_by or "client"
    return f"{q.client_message_id}  {local_time(q.queued_at)}  {by}  {size}  {preview}"


def agent_table(agents: Sequence[agent_types_pb.Agent], width: int) -> list[str]:
    """One line per agent, none longer than `width`: the whole id first, then the state (cut
    to _STATE_WIDTH; `corral show` has all of it), the queued prompts, when it last changed,
    then the provider and title, cut where the line ends."""
    header = ("ID", "STATE", "QUEUED", "UPDATED", "PROVIDER", "TITLE")
    today = datetime.now().date()
    rows = [
        (
            a.id,
            _clip(_state_cell(a), _STATE_WIDTH),
            str(len(a.queued_prompts)),
            _updated(a.updated_at, today),
            a.provider,
            one_line(a.title),
        )
        for a in agents
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        _clip(
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(),
            max(width, len(r[0])),
        )
        for r in [header, *rows]
    ]


def _state_cell(agent: agent_types_pb.Agent) -> str:
    """`idle`, `running`, `errored: why`, `closed`, `archived`; pending permissions after."""
    state = "archived" if agent.HasField("archived_at") else state_name(agent)
    if state == "errored":
        state = state_label(agent)
    count = len(agent.pending_permissions)
    return f"{state}, {count} perm{'' if count == 1 else 's'}" if count else state


def _updated(ts: Timestamp, today: date) -> str:
    """The time for today, the date for earlier days."""
    if not ts.seconds and not ts.nanos:
        return "-"
    when = datetime.fromtimestamp(ts.ToMilliseconds() / 1000)
    return when.strftime("%H:%M:%S" if when.date() == today else "%Y-%m-%d")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --- timeline rows -----------------------------------------------------------------------


def item_kind(row: timeline_pb.TimelineRow) -> str:
    return row.item.WhichOneof("kind") or "unknown"


def item_text(row: timeline_pb.TimelineItem) -> str:
    """A one-line summary of an item, for log lines."""
    kind = row.WhichOneof("kind")
    match kind:
        case "user_message":
            return one_line(row.user_message.text)
        case "assistant_message":
            return one_line(row.assistant_message.text)
        case "reasoning":
            return one_line(row.reasoning.text)
        case "tool_call":
            call = row.tool_call
            text = f"{call.name} {tool_status(call.status)}"
            return f"{text}: {one_line(call.error)}" if call.error else text
        case "todo":
            return "; ".join(
                f"[{'x' if e.completed else ' '}] {one_line(e.text)}" for e in row.todo.entries
            )
        case "error":
            code = f"{row.error.code}: " if row.error.code else ""
            return code + one_line(row.error.message)
        case "compaction":
            return one_line(row.compaction.summary)
        case "subagent_notice":
            notice = row.subagent_notice
            return f"{notice.child_agent_id} {one_line(notice.text)}"
        case _:
            return ""


def log_line(row: timeline_pb.TimelineRow) -> str:
    """`#seq  HH:MM:SS  kind  text`, and `(message ID)` after a user message the provider
    confirmed (the id `corral rewind` takes)."""
    when = local_time(row.timestamp, "%H:%M:%S")
    line = f"#{row.seq}  {when}  {item_kind(row)}  {item_text(row.item)}".rstrip()
    if row.provider_message_id and row.item.HasField("user_message"):
        line += f"  (message {row.provider_message_id})"
    return line


@dataclass
class TurnPrinter:
    """Prints a turn's rows as they arrive: the reply on stdout, everything else on stderr."""

    console: Console
    # The messages already shown from error rows, so the turn's failure does not repeat them.
    shown_errors: set[str] = field(default_factory=set)

    def row(self, row: timeline_pb.TimelineRow) -> None:
        item = row.item
        match item.WhichOneof("kind"):
            case "user_message":
                pass  # the user typed it
            case "assistant_message":
                self.console.line(item.assistant_message.text)
            case "reasoning":
                self.console.note(f"· thinking: {one_line(item.reasoning.text)}")
            case "tool_call":
                call = item.tool_call
                suffix = f": {one_line(call.error)}" if call.error else ""
                self.console.note(f"⚙ tool {call.name} {tool_status(call.status)}{suffix}")
            case "error":
                self.shown_errors.add(item.error.message)
                self.console.note(f"error: {item_text(item)}")
            case _:
                self.console.note(f"{item_kind(row)}: {item_text(item)}")

    def boundary(self, event: turn_pb.StreamTurnResponse) -> None:
        """A turn started or ended; a failure's message only if no error row said it."""
        if event.WhichOneof("event") == "turn_failed":
            failed = event.turn_failed
            if failed.error.message in self.shown_errors:
                self.console.note(f"turn {failed.turn_id} failed")
                return
        text = turn_boundary(event)
        if text:
            self.console.note(text)


def turn_boundary(event: turn_pb.StreamTurnResponse | event_pb.Event) -> str:
    """`turn ID started` / `completed` / `failed: why (code)` / `canceled: reason`, or "" for
    any other event. StreamTurn's events and Subscribe's share these field names."""
    kind: str | None
    if isinstance(event, turn_pb.StreamTurnResponse):
        kind = event.WhichOneof("event")
    else:
        kind = event.WhichOneof("payload")
    match kind:
        case "turn_started":
            return f"turn {event.turn_started.turn_id} started"
        case "turn_completed":
            return f"turn {event.turn_completed.turn_id} completed"
        case "turn_failed":
            error = event.turn_failed.error
            code = f" ({error.code})" if error.code else ""
            return f"turn {event.turn_failed.turn_id} failed: {one_line(error.message)}{code}"
        case "turn_canceled":
            reason = event.turn_canceled.reason
            return f"turn {event.turn_canceled.turn_id} canceled" + (
                f": {reason}" if reason else ""
            )
        case _:
            return ""
