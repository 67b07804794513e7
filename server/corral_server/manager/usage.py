"""Usage and cost, added up: each completed turn's usage goes to the ledger (for GetUsage by
agent, provider, model and day) and to the counters by provider and model (for the metrics
endpoint). The agent's own total (`Agent.usage_total`) is its snapshot's, added by the turn's
end (turn_end.py), so it lives and is stored with the agent.

Counters start from the ledger at open, so they survive restarts like the ledger does.

Must not: block the loop (the ledger's writes are group committed, its reads are threads').
"""

from __future__ import annotations

import asyncio
import logging

from corral_server.domain.agent import Agent, Usage
from corral_server.domain.usage import GroupBy, UsageEntry, UsageGroup, UsageQuery, add, group
from corral_server.records.usage import InMemoryUsageLedger, UsageLedger

log = logging.getLogger(__name__)

_BY_PROVIDER_MODEL = UsageQuery(None, None, None, frozenset({GroupBy.PROVIDER, GroupBy.MODEL}))


class UsageBook:
    def __init__(self, ledger: UsageLedger | None = None) -> None:
        self._ledger: UsageLedger = ledger or InMemoryUsageLedger()
        # (provider, model) -> usage and turns since the ledger began (read by the metrics).
        self.counters: dict[tuple[str, str], tuple[Usage, int]] = {}

    async def open(self) -> None:
        """Start the counters from what the ledger holds."""
        for g in group(await self._ledger.fine(None, None), _BY_PROVIDER_MODEL):
            self.counters[(g.provider, g.model)] = (g.usage, g.turns)

    def record(
        self, agent: Agent, turn_id: str, usage: Usage, ended_ms: int
    ) -> asyncio.Future[None]:
        """A turn of `agent` completed and spent `usage` (called on the agent's task, before
        the turn's end is published: a client told of the end finds it counted). Resolves
        once stored; a failure is logged here."""
        entry = UsageEntry(agent.id, turn_id, ended_ms, agent.provider, agent.model, usage)
        key = (agent.provider, agent.model)
        total, turns = self.counters.get(key, (Usage(), 0))
        self.counters[key] = (add(total, usage), turns + 1)
        stored = self._ledger.record(entry)
        stored.add_done_callback(_logged)
        return stored

    async def query(self, query: UsageQuery) -> list[UsageGroup]:
        return group(await self._ledger.fine(query.start_ms, query.end_ms), query)


def _logged(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.error("a turn's usage could not be stored: %s", exc)
