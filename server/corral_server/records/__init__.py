"""Durable records beside the timeline: agent snapshots, CreateAgent request ids, finished
turns, the Subscribe event log and sub-agent runs, as Protocols with an in-memory
implementation (store/ has the SQLite ones)."""

from corral_server.records.memory import (
    InMemoryAgentRecords,
    InMemoryCreateRequests,
    InMemoryEventLog,
    InMemoryFinishedTurns,
    InMemoryRunStore,
    new_incarnation,
)
from corral_server.records.store import (
    AgentRecords,
    BadRecord,
    BadRun,
    CreateRequests,
    EventLog,
    FinishedTurns,
    LoadedAgents,
    LoadedRuns,
    LogEntry,
    LogSpan,
    RunStore,
    spans_of,
)

__all__ = [
    "AgentRecords",
    "BadRecord",
    "BadRun",
    "CreateRequests",
    "EventLog",
    "FinishedTurns",
    "InMemoryAgentRecords",
    "InMemoryCreateRequests",
    "InMemoryEventLog",
    "InMemoryFinishedTurns",
    "InMemoryRunStore",
    "LoadedAgents",
    "LoadedRuns",
    "LogEntry",
    "LogSpan",
    "RunStore",
    "new_incarnation",
    "spans_of",
]
