"""The durable records beside the timeline: what the manager, the hub and the sub-agent registry
call, as Protocols, so none depends on SQLite. Two implementations pass one contract suite
(tests/unit/records/, tests/unit/subagents/test_store_contract.py): records/memory.py (tests,
benches) and store/ (SQLite, durable).

  AgentRecords     the latest snapshot of every agent, read back once at start-up
  CreateRequests   CreateAgent request ids -> (fingerprint, agent id), for idempotent retries
  FinishedTurns    (agent, turn id) of every ended turn: late provider events are dropped
  EventLog         the Subscribe event log: (revision, agent id, encoded event), retained in
                   rows and bytes, with an incarnation minted once per log
  RunStore         every sub-agent run's record, read back once at start-up

Writes return a future instead of being coroutines: the caller takes its place in the write
order at the call (as `TimelineStore.append_nowait`) and awaits the future when it must know the
write is durable (publish after, acknowledge after). A durable store resolves it after the
commit; the in-memory one at once. A write that cannot be stored fails its future (StoreError).

Must not: import protobuf or grpc (codecs are injected), or SQLite (store/ implements these).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from corral_server.domain.agent import Agent
from corral_server.domain.subagents import SubagentRun


class BadRecord(NamedTuple):
    """A stored agent record that could not be decoded: which agent and why."""

    agent_id: str
    error: str


class LoadedAgents(NamedTuple):
    """What start-up reads: every agent that decoded, in the order of their first `put`, and
    every record that did not (reported, never fatal to the others)."""

    agents: list[Agent]
    bad: list[BadRecord]


class AgentRecords(Protocol):
    """The latest snapshot of every agent. A record is a FULL snapshot (every field of Agent)
    and the last `put` of an agent wins whole: nothing is merged, so no field is ever erased
    by a write that did not carry it. Only the agent's single writer puts its agent, so
    "last" is well defined. An agent's timeline head (epoch, next_seq) belongs to the
    timeline store; the copy inside a record may be older and is not authoritative."""

    def put(self, agent: Agent) -> asyncio.Future[None]:
        """Upsert `agent`'s snapshot. Puts of one agent queued before a commit coalesce into
        one row write of the latest; every one of their futures resolves with that commit."""
        ...

    def delete(self, agent_id: str) -> asyncio.Future[None]:
        """Forget the agent's record (a later `put` of the agent stores it again). Deleting an
        unknown agent is a no-op."""
        ...

    async def load_headers(self) -> LoadedAgents:
        """Every stored agent (committed writes only), for start-up."""
        ...


class CreateRequests(Protocol):
    """CreateAgent request ids, all of them: no window, no trimming (one row of ~100 bytes
    per CreateAgent that carried an id; see store/requests.py for the sizes)."""

    def remember(
        self, request_id: str, fingerprint: bytes, agent_id: str, created_ms: int
    ) -> asyncio.Future[None]:
        """Remember which agent `request_id` created, and a fingerprint of the request so a
        reuse of the id for another request is told apart from a retry. Remembering an id
        again replaces its entry."""
        ...

    async def find(self, request_id: str) -> tuple[bytes, str] | None:
        """(fingerprint, agent id) of a remembered request, or None. Sees every `remember`
        already called, committed or not (the caller's own writes)."""
        ...


class FinishedTurns(Protocol):
    """The turn ids each agent has finished; the actor drops late events of these turns."""

    def add(self, agent_id: str, turn_id: str) -> asyncio.Future[None]: ...

    async def contains(self, agent_id: str, turn_id: str) -> bool:
        """Whether the turn finished: every `add` already called counts, committed or not."""
        ...

    def drop(self, agent_id: str) -> asyncio.Future[None]:
        """Forget every finished turn of the agent (its record is gone)."""
        ...


class LogEntry(NamedTuple):
    """One event of the log (a NamedTuple: one per event on the catch-up path)."""

    revision: int
    agent_id: str
    event: bytes


class LogSpan(NamedTuple):
    """Consecutive events of the log with their frames joined: how the catch-up path reads
    the log, a span at a time rather than an entry at a time (see `EventLog.read_spans`)."""

    first: int  # the revision of its first event; the others follow without a gap
    events: int  # how many
    frames: bytes  # the events' stored bytes (frames), joined in revision order
    # The agent of every one of its events, or each event's agent, in order.
    agents: str | tuple[str, ...]


def spans_of(entries: Sequence[LogEntry], span_events: int) -> list[LogSpan]:
    """`entries` (contiguous, in order) as spans of at most `span_events` events each, cut
    where `first - 1` is a multiple of `span_events`, so spans line up however read."""
    spans: list[LogSpan] = []
    start = 0
    while start < len(entries):
        first = entries[start].revision
        stop = min(len(entries), start + span_events - (first - 1) % span_events)
        part = entries[start:stop]
        agents = tuple(entry.agent_id for entry in part)
        one = agents[0] if agents.count(agents[0]) == len(agents) else agents
        spans.append(LogSpan(first, len(part), b"".join(e.event for e in part), one))
        start = stop
    return spans


class EventLog(Protocol):
    """The event log behind Subscribe revisions. Revisions are contiguous from 1; retention
    drops the oldest (by `retain_events` and `retain_bytes`, options of each implementation)
    and always keeps the newest entry. `incarnation` names this log: minted once, when the log
    is first created, and kept for its whole life (a durable log keeps it across restarts)."""

    @property
    def incarnation(self) -> str: ...

    @property
    def head_revision(self) -> int:
        """The newest committed revision (0 when nothing was ever appended)."""
        ...

    @property
    def next_revision(self) -> int:
        """The revision the next `append` must carry: one past the newest appended, committed
        or queued. After a failed commit it returns to `head_revision + 1`."""
        ...

    @property
    def earliest_revision(self) -> int:
        """The oldest retained revision (`head_revision + 1` when none is retained)."""
        ...

    def append(self, revision: int, agent_id: str, event: bytes) -> asyncio.Future[None]:
        """Append one event; `revision` must be `next_revision` (ValueError otherwise, at
        once). The future resolves once the entry is durable: publish it after, never
        before. A failed commit fails its appends and every append queued behind them."""
        ...

    def append_many(self, entries: Sequence[LogEntry]) -> asyncio.Future[None]:
        """Append `entries` (revisions `next_revision`, +1, ...; ValueError otherwise, at once,
        appending none) with one future for them all: what the hub uses, one per batch."""
        ...

    async def read(self, after_revision: int, limit: int, max_bytes: int) -> list[LogEntry]:
        """Committed entries with revision > `after_revision`, oldest first: at most `limit`
        of them and `max_bytes` of events, but always one at least when one is retained.
        Entries older than `earliest_revision` are gone: a first entry other than
        `after_revision + 1` tells the caller it fell behind the retention."""
        ...

    async def read_spans(
        self, after_revision: int, limit: int, max_bytes: int, span_events: int
    ) -> list[LogSpan]:
        """What `read` returns (the same entries, limit and bytes, except that the byte
        bound may cut a few entries earlier), as spans of at most `span_events` events cut
        where `first - 1` is a multiple of `span_events` (`spans_of`)."""
        ...


class BadRun(NamedTuple):
    """A stored run that could not be decoded: which run and why."""

    run_id: str
    error: str


class LoadedRuns(NamedTuple):
    """Every run that decoded, in the order of their first `put`, and every one that did not."""

    runs: list[SubagentRun]
    bad: list[BadRun]


class RunStore(Protocol):
    """Every sub-agent run's record. The last `put` of a run wins whole; only the sub-agent
    registry (the runs' single writer) puts runs."""

    def put(self, run: SubagentRun) -> asyncio.Future[None]:
        """Upsert the run's record, whole."""
        ...

    def delete(self, run_id: str) -> asyncio.Future[None]:
        """Forget the run (unknown: a no-op)."""
        ...

    async def load(self) -> LoadedRuns:
        """Every stored run (committed writes only), for start-up."""
        ...
