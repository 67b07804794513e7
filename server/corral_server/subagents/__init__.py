"""Sub-agent trees (seed 002): run records, their limits, queries, the announce outbox, and the
registry that is their single writer."""

from corral_server.domain.subagents import (
    RUN_ID_LABEL,
    AnnounceState,
    Cleanup,
    Outcome,
    RunId,
    SubagentRun,
)
from corral_server.records import InMemoryRunStore, LoadedRuns, RunStore
from corral_server.subagents.limits import SpawnRequest, SubagentLimits
from corral_server.subagents.registry import Counts, SubagentRegistry

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
