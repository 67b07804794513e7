"""The embedded durable store: one SQLite database in the state directory, written by one
group-committing thread, read by another; never touched from the event loop."""

from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import DB_FILE, Database, Synchronous
from corral_server.store.errors import SchemaTooNew, StoreError, StoreUnavailable, StoreWriteFailed
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.meta import EVENT_LOG_INCARNATION, read_meta, write_meta
from corral_server.store.requests import SqliteCreateRequests, SqliteFinishedTurns
from corral_server.store.schema import SCHEMA_VERSION
from corral_server.store.sqlite_timeline import SqliteTimelineStore

__all__ = [
    "DB_FILE",
    "EVENT_LOG_INCARNATION",
    "SCHEMA_VERSION",
    "Database",
    "SchemaTooNew",
    "SqliteAgentRecords",
    "SqliteCreateRequests",
    "SqliteEventLog",
    "SqliteFinishedTurns",
    "SqliteTimelineStore",
    "StoreError",
    "StoreUnavailable",
    "StoreWriteFailed",
    "Synchronous",
    "read_meta",
    "write_meta",
]
