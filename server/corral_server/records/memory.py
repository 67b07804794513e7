"""In-memory records: the contract of records/store.py without durability, for tests and benches.
Every write is done at its call; its future is already resolved.

Must not: be used where a restart must keep anything (nothing survives the process).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Generic, TypeVar

from corral_server.domain.agent import Agent
from corral_server.domain.subagents import SubagentRun
from corral_server.jobs import resolved
from corral_server.records.store import LoadedAgents, LoadedRuns, LogEntry, LogSpan, spans_of

V = TypeVar("V")

if TYPE_CHECKING:
    from corral_server.records.store import (
        AgentRecords,
        CreateRequests,
        EventLog,
        FinishedTurns,
        RunStore,
    )


def new_incarnation() -> str:
    """A fresh event-log identity: 128 random bits as 32 hex characters."""
    return secrets.token_hex(16)


class _Latest(Generic[V]):
    """The last value put under each key, in the order of each key's first put."""

    def __init__(self, key_of: Callable[[V], str]) -> None:
        self._key_of = key_of
        self._values: dict[str, V] = {}  # insertion order = order of first put

    def put(self, value: V) -> asyncio.Future[None]:
        self._values[self._key_of(value)] = value
        return resolved(None)

    def delete(self, key: str) -> asyncio.Future[None]:
        self._values.pop(key, None)
        return resolved(None)

    def _all(self) -> list[V]:
        return list(self._values.values())


class InMemoryAgentRecords(_Latest[Agent]):
    def __init__(self) -> None:
        super().__init__(lambda agent: agent.id)

    async def load_headers(self) -> LoadedAgents:
        return LoadedAgents(self._all(), [])


class InMemoryRunStore(_Latest[SubagentRun]):
    def __init__(self) -> None:
        super().__init__(lambda run: run.run_id)

    async def load(self) -> LoadedRuns:
        return LoadedRuns(self._all(), [])


class InMemoryCreateRequests:
    def __init__(self) -> None:
        self._requests: dict[str, tuple[bytes, str]] = {}

    def remember(
        self, request_id: str, fingerprint: bytes, agent_id: str, created_ms: int
    ) -> asyncio.Future[None]:
        self._requests[request_id] = (fingerprint, agent_id)
        return resolved(None)

    async def find(self, request_id: str) -> tuple[bytes, str] | None:
        return self._requests.get(request_id)


class InMemoryFinishedTurns:
    def __init__(self) -> None:
        self._turns: dict[str, set[str]] = {}

    def add(self, agent_id: str, turn_id: str) -> asyncio.Future[None]:
        self._turns.setdefault(agent_id, set()).add(turn_id)
        return resolved(None)

    async def contains(self, agent_id: str, turn_id: str) -> bool:
        return turn_id in self._turns.get(agent_id, ())

    def drop(self, agent_id: str) -> asyncio.Future[None]:
        self._turns.pop(agent_id, None)
        return resolved(None)


class InMemoryEventLog:
    """`retain_events` and `retain_bytes` (None = no limit) bound the retained entries; the
    newest one is always kept. Bytes are the events' encoded sizes."""

    def __init__(
        self,
        *,
        retain_events: int | None = None,
        retain_bytes: int | None = None,
        mint: Callable[[], str] = new_incarnation,
    ) -> None:
        check_retention(retain_events, retain_bytes)
        self._retain_events = retain_events
        self._retain_bytes = retain_bytes
        self._incarnation = mint()
        self._entries: deque[LogEntry] = deque()
        self._bytes = 0
        self._head = 0

    @property
    def incarnation(self) -> str:
        return self._incarnation

    @property
    def head_revision(self) -> int:
        return self._head

    @property
    def next_revision(self) -> int:
        return self._head + 1

    @property
    def earliest_revision(self) -> int:
        return self._entries[0].revision if self._entries else self._head + 1

    def append(self, revision: int, agent_id: str, event: bytes) -> asyncio.Future[None]:
        return self.append_many((LogEntry(revision, agent_id, event),))

    def append_many(self, batch: Sequence[LogEntry]) -> asyncio.Future[None]:
        check_batch(batch, self._head + 1)
        entries = self._entries
        for entry in batch:
            entries.append(entry)
            self._bytes += len(entry.event)
        if batch:
            self._head = batch[-1].revision
        while len(entries) > 1 and (
            (self._retain_events is not None and len(entries) > self._retain_events)
            or (self._retain_bytes is not None and self._bytes > self._retain_bytes)
        ):
            self._bytes -= len(entries.popleft().event)
        return resolved(None)

    async def read(self, after_revision: int, limit: int, max_bytes: int) -> list[LogEntry]:
        check_read(limit, max_bytes)
        entries = self._entries
        if not entries:
            return []
        start = max(0, after_revision + 1 - entries[0].revision)
        out: list[LogEntry] = []
        budget = max_bytes
        for index in range(start, min(len(entries), start + limit)):
            entry = entries[index]
            budget -= len(entry.event)
            if budget < 0 and out:
                break
            out.append(entry)
        return out

    async def read_spans(
        self, after_revision: int, limit: int, max_bytes: int, span_events: int
    ) -> list[LogSpan]:
        check_spans(span_events)
        return spans_of(await self.read(after_revision, limit, max_bytes), span_events)


def check_retention(retain_events: int | None, retain_bytes: int | None) -> None:
    if retain_events is not None and retain_events < 1:
        raise ValueError(f"retain_events must be at least 1, got {retain_events}")
    if retain_bytes is not None and retain_bytes < 1:
        raise ValueError(f"retain_bytes must be at least 1, got {retain_bytes}")


def check_revision(revision: int, expected: int) -> None:
    if revision != expected:
        raise ValueError(f"the event log's next revision is {expected}, not {revision}")


_REVISION = itemgetter(0)  # a LogEntry's


def check_batch(batch: Sequence[LogEntry], expected: int) -> None:
    """`batch` must be numbered `expected`, `expected + 1`, ... (checked before any is kept)."""
    revisions = list(map(_REVISION, batch))  # compared in C: batches of thousands, per commit
    if revisions == list(range(expected, expected + len(batch))):
        return
    for offset, revision in enumerate(revisions):
        check_revision(revision, expected + offset)


def check_read(limit: int, max_bytes: int) -> None:
    if limit < 1 or max_bytes < 1:
        raise ValueError(f"limit and max_bytes must be at least 1, got {limit}, {max_bytes}")


def check_spans(span_events: int) -> None:
    if span_events < 1:
        raise ValueError(f"span_events must be at least 1, got {span_events}")


if TYPE_CHECKING:

    def _satisfy(
        a: InMemoryAgentRecords, c: InMemoryCreateRequests, f: InMemoryFinishedTurns
    ) -> tuple[AgentRecords, CreateRequests, FinishedTurns]:
        return a, c, f  # mypy proves each implements its protocol

    def _satisfy_log(log: InMemoryEventLog, runs: InMemoryRunStore) -> tuple[EventLog, RunStore]:
        return log, runs
