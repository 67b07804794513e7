"""Timeline values: items, rows, cursors and fetch receipts (docs/design.md#cursors).

Invariant: within one epoch, seqs are 1-based and contiguous; a row, once appended, keeps its
seq and item for ever (only `provider_message_id` may be filled in later, by echo
reconciliation). A re-based timeline gets a new epoch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = dict[str, JsonValue]

# The page size of a FetchTimeline that sets no limit (docs/design.md#cursors).
DEFAULT_PAGE_LIMIT = 200

# The size limits that keep every answer within a default gRPC client's 4 MiB receive limit
# (docs/api.md#limits). Sizes are encoded bytes, estimated by timeline/size.py.
# No stored row is bigger than this: long assistant text is split over several rows, other
# items are cut with a marker (manager/oversize.py); prompts are checked (manager/validate.py).
MAX_ROW_BYTES = 2 * 1024 * 1024
# A FetchTimeline page holds rows of at most this many bytes in all, whatever its `limit`,
# and always at least one row: a page is at most one row or this budget, under 4 MiB.
MAX_PAGE_BYTES = 2 * 1024 * 1024
# ... and at most this many rows (`limit: 0` included): converting a row to protobuf costs
# ~10 us (BENCHMARKS.md, P2), so a page blocks the event loop for 100 ms at most.
MAX_PAGE_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    client_message_id: str = ""
    message_id: str = ""


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str
    message_id: str = ""


@dataclass(frozen=True, slots=True)
class Reasoning:
    text: str


class ToolCallStatus(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        return self in (ToolCallStatus.COMPLETED, ToolCallStatus.FAILED, ToolCallStatus.CANCELED)


@dataclass(frozen=True, slots=True)
class OutputRef:
    """A tool call's output kept apart from its row (manager/tool_output.py): `size_bytes` of
    UTF-8 text, or of compact JSON text when `json`; the row's `output` is its preview."""

    blob_id: str
    size_bytes: int
    preview_truncated: bool = True
    json: bool = False


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    status: ToolCallStatus
    input: JsonValue = None
    output: JsonValue = None
    error: str = ""
    output_ref: OutputRef | None = None


@dataclass(frozen=True, slots=True)
class TodoEntry:
    text: str
    completed: bool = False


@dataclass(frozen=True, slots=True)
class Todo:
    entries: tuple[TodoEntry, ...]


@dataclass(frozen=True, slots=True)
class ErrorItem:
    message: str
    code: str = ""


@dataclass(frozen=True, slots=True)
class Compaction:
    summary: str


@dataclass(frozen=True, slots=True)
class SubagentNotice:
    run_id: str
    child_agent_id: str
    text: str


TimelineItem: TypeAlias = (
    UserMessage
    | AssistantMessage
    | Reasoning
    | ToolCall
    | Todo
    | ErrorItem
    | Compaction
    | SubagentNotice
)


@dataclass(frozen=True, slots=True)
class Cursor:
    """One row of one epoch. `seq` is 1-based."""

    epoch: str
    seq: int


class TimelineRow(NamedTuple):
    """One stored row. A NamedTuple, not a frozen dataclass, for the same immutability at a
    third of the construction cost: rows are built on the timeline writer's hot path (measured:
    1.3 us per frozen dataclass vs 0.4 us per NamedTuple)."""

    seq: int
    timestamp_ms: int
    item: TimelineItem
    turn_id: str = ""
    provider_message_id: str = ""


class Direction(enum.Enum):
    TAIL = "tail"
    BEFORE = "before"
    AFTER = "after"


@dataclass(frozen=True, slots=True)
class TimelineWindow:
    """The retained range: `min_seq`..`max_seq` (both 0 when empty); `next_seq` = max + 1."""

    min_seq: int
    max_seq: int
    next_seq: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetch receipt: never a silent partial answer (docs/design.md#cursors)."""

    epoch: str
    window: TimelineWindow
    rows: tuple[TimelineRow, ...]
    has_older: bool
    has_newer: bool
    reset: bool = False
    stale_cursor: bool = False
    gap: bool = False
    # What the rows weigh as the store measured them for the page's byte budget (the sum of
    # timeline/size.py's `row_bytes`); None where it did not add them up. Not on the wire,
    # and not part of what a receipt is (two receipts of the same rows are equal).
    size: int | None = field(default=None, compare=False)

    @property
    def start_cursor(self) -> Cursor | None:
        return Cursor(self.epoch, self.rows[0].seq) if self.rows else None

    @property
    def end_cursor(self) -> Cursor | None:
        return Cursor(self.epoch, self.rows[-1].seq) if self.rows else None


@dataclass(frozen=True, slots=True)
class TimelineHead:
    epoch: str
    next_seq: int
