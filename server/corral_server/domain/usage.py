"""Token usage and cost as values: one completed turn's entry, the totals of a group, and how
a usage query groups. Plain values; the ledger (records/usage.py, store/usage.py) keeps the
entries, manager/usage.py adds them up.

Must not: import protobuf, grpc or SQLite.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

from corral_server.domain.agent import Usage


def add(total: Usage, more: Usage) -> Usage:
    return Usage(
        total.input_tokens + more.input_tokens,
        total.output_tokens + more.output_tokens,
        total.cached_input_tokens + more.cached_input_tokens,
        total.cost_usd + more.cost_usd,
    )


def utc_day(ms: int) -> str:
    """YYYY-MM-DD of the UTC day `ms` (milliseconds since the epoch) falls on."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d")


class GroupBy(enum.Enum):
    AGENT = "agent"
    PROVIDER = "provider"
    MODEL = "model"
    DAY = "day"


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """What one completed turn spent, with what it is grouped by."""

    agent_id: str
    turn_id: str
    ended_ms: int
    provider: str
    model: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """Usage added up over `turns` turns. A field the group is not keyed by is ""."""

    agent_id: str
    provider: str
    model: str
    day: str
    usage: Usage
    turns: int

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The order groups are answered in."""
        return (self.day, self.provider, self.model, self.agent_id)


@dataclass(frozen=True, slots=True)
class UsageQuery:
    # None: every agent.
    agent_ids: frozenset[str] | None
    start_ms: int | None
    end_ms: int | None
    group_by: frozenset[GroupBy]


def group(fine: Iterable[UsageGroup], query: UsageQuery) -> list[UsageGroup]:
    """`fine` (groups by agent, provider, model and day) regrouped as `query` asks, in `key`
    order: agents outside the query's left out, the fields it does not group by emptied."""
    by = query.group_by
    merged: dict[tuple[str, str, str, str], UsageGroup] = {}
    for g in fine:
        if query.agent_ids is not None and g.agent_id not in query.agent_ids:
            continue
        keyed = UsageGroup(
            g.agent_id if GroupBy.AGENT in by else "",
            g.provider if GroupBy.PROVIDER in by else "",
            g.model if GroupBy.MODEL in by else "",
            g.day if GroupBy.DAY in by else "",
            g.usage,
            g.turns,
        )
        have = merged.get(keyed.key)
        if have is not None:
            keyed = replace(
                keyed, usage=add(have.usage, keyed.usage), turns=have.turns + keyed.turns
            )
        merged[keyed.key] = keyed
    return [merged[k] for k in sorted(merged)]
