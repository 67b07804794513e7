"""The manager's reads by agent id (`AgentReads`): timeline pages, tool outputs, GetActivity's
digest, a queued prompt or a pending permission in full. Each finds the agent first (an
unknown id is AGENT_NOT_FOUND even for a timeline that still exists), then reads its timeline
or its snapshot. Beside them the reads that need more than one page call: the digest, and the
tool output a row keeps apart (FetchToolOutput by cursor).

Must not: change anything (a read never takes the agent's queue).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from corral_server import errors
from corral_server.domain.agent import PendingPermission, QueuedPrompt
from corral_server.domain.timeline import Cursor, Direction, FetchResult, ToolCall
from corral_server.manager import permissions
from corral_server.manager.directory import AgentDirectory
from corral_server.manager.validate import Limits, check_id
from corral_server.timeline.activity import (
    DEFAULT_ACTIVITY_MAX_CHARS,
    ActivityDigest,
    curate_activity,
)
from corral_server.timeline.store import OutputChunk, TimelineStore


@dataclass(frozen=True, slots=True)
class AgentReads:
    directory: AgentDirectory
    timeline: TimelineStore
    limits: Limits

    async def fetch_timeline(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        self.directory.agent(agent_id)  # here, or another node's in the read model
        return await self.timeline.fetch(agent_id, direction, cursor, limit)

    async def fetch_tool_output(
        self, agent_id: str, blob_id: str, offset: int, limit: int
    ) -> OutputChunk:
        """One chunk of a tool output kept apart from its row (manager/tool_output.py)."""
        self.directory.agent(agent_id)  # here, or another node's in the read model
        return await self.timeline.read_output(agent_id, blob_id, offset, limit)

    async def tool_output_id(self, agent_id: str, cursor: Cursor) -> str:
        self.directory.agent(agent_id)  # here, or another node's in the read model
        return await tool_output_id(self.timeline, agent_id, cursor)

    async def activity(
        self, agent_id: str, start: Cursor | None, end: Cursor | None, max_chars: int
    ) -> ActivityDigest:
        self.directory.agent(agent_id)  # here, or another node's in the read model
        return await activity(self.timeline, agent_id, start, end, max_chars)

    def queued_prompt(self, agent_id: str, client_message_id: str) -> QueuedPrompt:
        """A queued prompt in full (listings show its summary)."""
        check_id("client_message_id", client_message_id, self.limits)
        for queued in self.directory.agent(agent_id).queued_prompts:
            if queued.client_message_id == client_message_id:
                return queued
        raise errors.QueuedPromptNotFound(agent_id, client_message_id)

    def pending_permission(self, agent_id: str, request_id: str) -> PendingPermission:
        """A pending permission request in full (listings clip its input)."""
        check_id("request_id", request_id, self.limits)
        return permissions.find(self.directory.agent(agent_id), request_id)


async def activity(
    timeline: TimelineStore,
    agent_id: str,
    start: Cursor | None,
    end: Cursor | None,
    max_chars: int,
) -> ActivityDigest:
    """A plain-text digest of rows start..end (inclusive; default the whole timeline),
    newest rows first to survive the `max_chars` budget. Reads a bounded page only: every
    rendered row takes at least a few characters, so more rows could never fit."""
    budget = max_chars or DEFAULT_ACTIVITY_MAX_CHARS
    if budget < 0:
        raise errors.InvalidArgument.field("max_chars", "must not be negative")
    epoch = timeline.head(agent_id).epoch
    for name, cursor in (("start_cursor", start), ("end_cursor", end)):
        if cursor is not None and cursor.epoch != epoch:
            raise errors.InvalidArgument.field(f"{name}.epoch", "the cursor is from another epoch")
    rows_limit = budget // 4 + 1
    if end is None:
        page = await timeline.fetch(agent_id, Direction.TAIL, None, rows_limit)
    else:
        after_end = Cursor(end.epoch, min(end.seq + 1, timeline.head(agent_id).next_seq))
        page = await timeline.fetch(agent_id, Direction.BEFORE, after_end, rows_limit)
    rows = [r for r in page.rows if start is None or r.seq >= start.seq]
    digest = curate_activity(rows, budget)
    if page.has_older and (start is None or (rows and rows[0].seq > start.seq)):
        digest = replace(digest, truncated=True)  # older rows in range were not even read
    return digest


async def tool_output_id(timeline: TimelineStore, agent_id: str, cursor: Cursor) -> str:
    """The blob id of the tool output the row at `cursor` keeps apart (ToolOutputNotFound
    when that row is not retained in the current epoch, or keeps none)."""
    before = Cursor(cursor.epoch, cursor.seq - 1)
    page = await timeline.fetch(agent_id, Direction.AFTER, before, 1)
    item = page.rows[0].item if page.rows and page.rows[0].seq == cursor.seq else None
    if page.reset or type(item) is not ToolCall or item.output_ref is None:
        raise errors.ToolOutputNotFound(agent_id, f"row {cursor.seq} of epoch {cursor.epoch}")
    return item.output_ref.blob_id
