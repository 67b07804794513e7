"""Sub-agent trees (docs/design.md#subagents): run records, their limits, queries, the announce
outbox, and the registry that is their single writer."""

from corral_server.domain.subagents import (
    RUN_ID_LABEL,
    AnnounceState,
    Cleanup,
    Outcome,
    RunId,
    SubagentRun,
)
from corral_server.subagents.limits import SpawnRequest, SubagentLimits
from corral_server.subagents.registry import Counts, SubagentRegistry
from corral_server.subagents.store import InMemoryRunStore, LoadedRuns, RunStore

__all__ = [
    "RUN_ID_LABEL",
    "AnnounceState",
    "Cleanup",
    "Counts",
    "InMemoryRunStore",
    "LoadedRuns",
    "Outcome",
    "RunId",
    "RunStore",
    "SpawnRequest",
    "SubagentLimits",
    "SubagentRegistry",
    "SubagentRun",
]
