"""The usage ledger: one entry per completed turn that reported usage, kept so usage can be
added up by agent, provider, model and day over any time range. Two implementations: the one
here, in memory (no state directory), and store/usage.py (SQLite, durable).

Must not: import protobuf, grpc or SQLite.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from corral_server.domain.usage import GroupBy, UsageEntry, UsageGroup, UsageQuery, group, utc_day
from corral_server.jobs import resolved

# Grouped by everything: what `fine` answers, regrouped by the caller (domain/usage.py `group`).
EVERY_KEY = frozenset(GroupBy)


class UsageLedger(Protocol):
    def record(self, entry: UsageEntry) -> asyncio.Future[None]:
        """Keep `entry`; the future resolves once it is stored (committed with the writes
        queued before it)."""
        ...

    async def fine(self, start_ms: int | None, end_ms: int | None) -> list[UsageGroup]:
        """The entries that ended in [start_ms, end_ms) (None: unbounded), added up by agent,
        provider, model and UTC day."""
        ...


class InMemoryUsageLedger:
    """Holds every entry (about 150 bytes each): for daemons without a state directory."""

    def __init__(self) -> None:
        self._entries: list[UsageEntry] = []

    def record(self, entry: UsageEntry) -> asyncio.Future[None]:
        self._entries.append(entry)
        return resolved(None)

    async def fine(self, start_ms: int | None, end_ms: int | None) -> list[UsageGroup]:
        singles = (
            UsageGroup(e.agent_id, e.provider, e.model, utc_day(e.ended_ms), e.usage, 1)
            for e in self._entries
            if (start_ms is None or e.ended_ms >= start_ms)
            and (end_ms is None or e.ended_ms < end_ms)
        )
        return group(singles, UsageQuery(None, None, None, EVERY_KEY))


def _satisfies_the_protocol(ledger: InMemoryUsageLedger) -> UsageLedger:
    return ledger  # mypy proves InMemoryUsageLedger implements UsageLedger
