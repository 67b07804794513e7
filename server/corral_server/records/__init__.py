"""Durable records beside the timeline: agent snapshots, CreateAgent request ids, finished
turns and the Subscribe event log, as Protocols with an in-memory implementation (store/ has
the SQLite ones)."""

from corral_server.records.memory import (
    InMemoryAgentRecords,
    InMemoryCreateRequests,
    InMemoryEventLog,
    InMemoryFinishedTurns,
    new_incarnation,
)
from corral_server.records.store import (
    AgentRecords,
    BadRecord,
    CreateRequests,
    EventLog,
    FinishedTurns,
    LoadedAgents,
    LogEntry,
)

__all__ = [
    "AgentRecords",
    "BadRecord",
    "CreateRequests",
    "EventLog",
    "FinishedTurns",
    "InMemoryAgentRecords",
    "InMemoryCreateRequests",
    "InMemoryEventLog",
    "InMemoryFinishedTurns",
    "LoadedAgents",
    "LogEntry",
    "new_incarnation",
]
