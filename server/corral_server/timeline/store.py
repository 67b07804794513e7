"""The timeline store contract (docs/design.md#cursors).

Only the agent's actor (its single writer) calls the mutating methods; any reader may fetch.
Seeking a page must not scan the timeline: a page costs the same at 1 k and at 1 M rows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypedDict

from corral_server.domain.timeline import (
    MAX_PAGE_BYTES,
    MAX_PAGE_ROWS,
    Cursor,
    Direction,
    FetchResult,
    TimelineHead,
    TimelineItem,
    TimelineRow,
)


def new_epoch() -> str:
    """A fresh timeline epoch: 128 random bits as 32 hex characters (every store's default)."""
    return uuid.uuid4().hex


class NewRow(NamedTuple):
    """A row to append; the store assigns its seq. (A NamedTuple: built per row on the
    writer's hot path, see TimelineRow.)"""

    item: TimelineItem
    timestamp_ms: int
    turn_id: str = ""
    provider_message_id: str = ""
    # A tool call's output kept apart (manager/tool_output.py): its bytes, stored with the row
    # in one transaction under `item.output_ref.blob_id`. None for every other row.
    output: bytes | None = None


class ItemCodec(Protocol):
    """How a durable store turns an item into bytes and back. The daemon's codec lives at the
    rpc edge (rpc/item_codec.py: the wire's protobuf encoding), so no store imports protobuf.
    `decode(encode(item))` equals `item` for every item the timeline writer stores."""

    def encode(self, item: TimelineItem) -> bytes: ...

    def decode(self, data: bytes) -> TimelineItem: ...


class OutputChunk(NamedTuple):
    """Bytes offset .. offset + len(data) of a kept tool output of `size_bytes` in all."""

    data: bytes
    offset: int
    size_bytes: int
    json: bool


class TimelineStore(Protocol):
    async def create(self, agent_id: str) -> TimelineHead:
        """Create an empty timeline with a freshly minted epoch."""
        ...

    async def append(self, agent_id: str, rows: Sequence[NewRow]) -> list[TimelineRow]:
        """Append rows in order; they get the next contiguous seqs of the current epoch."""
        ...

    def append_nowait(
        self, agent_id: str, rows: Sequence[NewRow]
    ) -> asyncio.Future[list[TimelineRow]]:
        """`append` without waiting: the rows take their seqs at this call, in call order, and
        the future gives them once they are stored (durably, for a durable store). Lets the
        single writer go on with the next rows while earlier ones commit; one agent's
        futures complete in call order. An unknown agent raises AgentNotFound at once."""
        ...

    def append_encoded(
        self, agent_id: str, rows: Sequence[NewRow], items: Sequence[bytes] | None
    ) -> asyncio.Future[None]:
        """`append_nowait` for the single writer, which needs no rows back: `items`, when
        given, holds each row's item as this store's codec encodes it (the writer encoded
        it once for the row's event too), so a durable store encodes nothing and builds no
        row objects; None: the store encodes them itself."""
        ...

    async def fetch(
        self,
        agent_id: str,
        direction: Direction,
        cursor: Cursor | None,
        limit: int | None,
    ) -> FetchResult:
        """A page with its receipt. `limit` None = DEFAULT_PAGE_LIMIT, 0 = the whole window.
        BEFORE and AFTER need a cursor (TAIL ignores it). A cursor from another epoch ->
        stale_cursor + reset with the tail; an AFTER cursor older than the retained window ->
        gap + reset with the tail."""
        ...

    def head(self, agent_id: str) -> TimelineHead:
        """The current epoch and next seq (KeyError when the agent has no timeline)."""
        ...

    async def rebase(self, agent_id: str) -> TimelineHead:
        """Drop every row and mint a new epoch; seqs restart at 1."""
        ...

    async def set_provider_message_id(
        self, agent_id: str, seq: int, provider_message_id: str
    ) -> None:
        """Echo reconciliation: the only in-place change a row may get
        (docs/design.md#echo-and-rewind)."""
        ...

    async def drop(self, agent_id: str) -> None:
        """Forget the timeline entirely."""
        ...

    async def read_output(
        self, agent_id: str, blob_id: str, offset: int, limit: int
    ) -> OutputChunk:
        """Up to `limit` bytes from `offset` of a tool output a retained row of the current
        epoch references (ToolOutputNotFound otherwise; InvalidArgument for an offset past
        its size). A row appended with an `output_ref` and no `output` (a rewind's copy)
        takes over the output its earlier copy kept."""
        ...


class Options(TypedDict, total=False):
    """What every store's constructor takes: `retain_rows` caps the rows kept per agent (the
    oldest dropped first, so the oldest retained seq rises; None keeps every row),
    `epoch_factory` mints epochs, `max_page_rows` and `max_page_bytes` cap a page whatever its
    limit (one row always fits)."""

    retain_rows: int | None
    epoch_factory: Callable[[], str]
    max_page_rows: int
    max_page_bytes: int


class Limits(NamedTuple):
    """`Options` checked, with their defaults."""

    retain_rows: int | None
    epoch_factory: Callable[[], str]
    max_page_rows: int
    max_page_bytes: int


def checked_options(options: Options) -> Limits:
    """Retention and page limits of at least 1 (ValueError otherwise)."""
    limits = Limits(
        options.get("retain_rows"),
        options.get("epoch_factory", new_epoch),
        options.get("max_page_rows", MAX_PAGE_ROWS),
        options.get("max_page_bytes", MAX_PAGE_BYTES),
    )
    if limits.retain_rows is not None and limits.retain_rows < 1:
        raise ValueError(f"retain_rows must be at least 1, got {limits.retain_rows}")
    if limits.max_page_rows < 1 or limits.max_page_bytes < 1:
        raise ValueError(f"page limits must be at least 1, got {limits.max_page_rows} rows")
    return limits
