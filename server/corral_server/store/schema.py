"""The database schema and its migrations (PRAGMA user_version = how many have run).

`MIGRATIONS[i]` takes a database from version i to i + 1: an SQL script, or a function that
runs in the writer's connection (for a migration that rewrites records). Each runs in one
transaction with the version bump, so a crash or a full disk mid-migration leaves the previous
version intact. A database whose version is above `len(MIGRATIONS)` was written by a newer
corral and is refused (never downgraded). Append new migrations; never edit a released one.

The schema version also fixes how the blobs are encoded (store/format/): a change of the
storage messages is a migration here, never a side effect of a change of the API.

Version 1 creates the durable store's tables:

meta             key -> text value: small facts about the whole store, e.g.
                 'event_log_incarnation' (Subscribe revisions restart only with a new one).
agents           agent_id -> its record (a corral.storage.v1.Agent, store/format/agents.py)
                 and when it was last written; start-up reads this table, never the rows.
timelines        one row per agent timeline, its head: the epoch, next_seq (the seq the next
                 row gets) and first_seq (the oldest retained seq; next_seq when none is). The
                 store keeps all heads in memory, loaded from here at open. `timeline_id` is
                 the short key of (agent, epoch) in timeline_rows: a rebase takes a new one.
timeline_rows    the rows of each (agent, epoch): keyed by (timeline_id, seq), so a page is
                 one range scan of the primary key, whatever the timeline's length (no OFFSET).
                 `item` is a corral.storage.v1.TimelineItem: the bytes the writer streams
                 (store/format/__init__.py says why they are the same).
events           the event log behind Subscribe: revision -> the agent it concerns ('' for
                 none) and the encoded event; retention trims the oldest revisions.
create_requests  CreateAgent request ids -> the agent they created and an encoded fingerprint
                 of the request, so a retry returns the same agent and a reuse is detected.
finished_turns   (agent, turn id) of every finished turn: a late provider event for one of
                 them is dropped instead of starting a ghost turn.

Version 2 adds `agents.created_order`: the order of each agent's first record, so start-up
lists agents in creation order as the daemon did before the restart (created_at_ms ties
within a millisecond, and agent ids are random). A record written again keeps its order.

Version 3 adds `subagent_runs`: run_id -> the run's record and the order of its first write,
so start-up restores runs in spawn order. (Records were JSON until version 6.)

Version 4 adds `queued_prompts`: the content of each prompt an agent holds queued, one row per
content part (a text part's UTF-8 in `text`, an image's type and bytes), keyed by agent,
client_message_id and part. The agent record keeps only each queued prompt's summary, so a
prompt is stored once, not again with every rewrite of its agent's record
(store/queued_prompts.py). A rowid table: a part can be megabytes, too big for a WITHOUT ROWID
row.

Version 5 adds `timeline_text`, the FTS5 full-text index of the timelines' rows (rowid =
timeline_id * 2**32 + seq; store/search.py), and the 'search_backfill' cursor in `meta`: the
rows a database from before v5 holds are indexed in the background after start-up.

Version 6 gives the records a storage format of their own (proto/corral/storage/v1/): every
run's JSON record is rewritten as a corral.storage.v1.SubagentRun, and `meta` names the format
('record_format'). Agent records and timeline items need no rewrite: the storage messages kept
the numbers of the API messages they were written as. A run whose JSON does not read is left as
it is, for start-up to report as a bad record.

Version 7 adds `schedules`: schedule_id -> the schedule's record (its timing, target, prompt,
next firing and last run; JSON text until version 10) and when it was created, so start-up
restores schedules in creation order.

Version 8 adds `tool_outputs`: a tool call's output too big to keep in its row (over 256 KiB;
manager/tool_output.py), stored once, keyed by the blob id the row's item names
(ToolCall.output_ref) and by the row that holds it (timeline_id, seq), with `json` (the bytes
are JSON text) and `data`. It is written, trimmed and deleted with its row
(store/tool_outputs.py). A rowid table: an output is megabytes, read in chunks by incremental
blob I/O. IF NOT EXISTS: a database whose version was set back by hand migrates again intact.

Version 9 adds `turn_usage`: one row per completed turn that reported usage (tokens, cost,
the agent's provider and model, when it ended), so usage adds up by agent, provider, model and
day (store/usage.py). A database from before v9 starts it empty: turns completed before the
upgrade are not in it (their agents' `usage_total` starts from zero too).

Version 10 stores schedules in the storage format: every schedule's JSON text is rewritten as a
corral.storage.v1.Schedule, in a `schedules` table rebuilt with `record` a BLOB. Re-runnable: a
record already rewritten is kept as it is, and so is one whose JSON does not read (start-up
refuses it, as it refused it before).

Version 11 stores the event log as runs (`event_runs`, store/event_runs.py): up to 64
consecutive events of one commit in one row, their frames joined, with each event's agent and
where its frame ends; a run never crosses a multiple of 64. So a subscriber catching up from the
log reads one row per 64 events after a burst, not one per event, and a commit writes a row per
64 events. The migration turns `events` (one row per event) into runs and drops it.
Re-runnable.

Version 12 adds the cluster's read model position (docs/cluster.md#read-model): `cluster_followed`
(the stream's incarnation -> the last stream sequence this node applied, written in the same
transaction as what it applied) and `cluster_owners` (agent -> the node of its last claim in the
stream). A single daemon leaves both empty.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from corral_server.store.errors import SchemaTooNew, StoreUnavailable, why
from corral_server.store.event_runs import events_as_runs
from corral_server.store.format import run_json, runs, schedule_json, schedules

_V1 = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE agents (
    agent_id TEXT PRIMARY KEY,
    record BLOB NOT NULL,
    updated_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE timelines (
    agent_id TEXT PRIMARY KEY,
    timeline_id INTEGER NOT NULL UNIQUE,
    epoch TEXT NOT NULL,
    next_seq INTEGER NOT NULL,
    first_seq INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE timeline_rows (
    timeline_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    provider_message_id TEXT NOT NULL,
    item BLOB NOT NULL,
    PRIMARY KEY (timeline_id, seq)
) WITHOUT ROWID;

CREATE TABLE events (
    revision INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL,
    event BLOB NOT NULL
);

CREATE TABLE create_requests (
    request_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    created_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE finished_turns (
    agent_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    PRIMARY KEY (agent_id, turn_id)
) WITHOUT ROWID;
"""

_V2 = """
ALTER TABLE agents ADD COLUMN created_order INTEGER NOT NULL DEFAULT 0;
"""

_V3 = """
CREATE TABLE subagent_runs (
    run_id TEXT PRIMARY KEY,
    record BLOB NOT NULL,
    created_order INTEGER NOT NULL
) WITHOUT ROWID;
"""

_V4 = """
CREATE TABLE queued_prompts (
    agent_id TEXT NOT NULL,
    client_message_id TEXT NOT NULL,
    part INTEGER NOT NULL,
    text BLOB,
    mime_type TEXT,
    data BLOB,
    PRIMARY KEY (agent_id, client_message_id, part)
);
"""

_V5 = """
CREATE VIRTUAL TABLE timeline_text USING fts5(text, kind UNINDEXED, timestamp_ms UNINDEXED);
INSERT INTO meta (key, value) VALUES ('search_backfill', '0 0');
"""

RECORD_FORMAT = "corral.storage.v1"


def _records_in_storage_format(conn: sqlite3.Connection) -> None:
    rewritten: list[tuple[bytes, str]] = []
    for run_id, record in conn.execute("SELECT run_id, record FROM subagent_runs"):
        try:
            rewritten.append((runs.encode_run(run_json.decode_json_run(bytes(record))), run_id))
        except Exception:  # kept as it is: the loader reports it, the other runs load
            continue
    conn.executemany("UPDATE subagent_runs SET record = ? WHERE run_id = ?", rewritten)
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('record_format', ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (RECORD_FORMAT,),
    )


Migration = str | Callable[[sqlite3.Connection], None]

_V7_SCHEDULES = """
CREATE TABLE IF NOT EXISTS schedules (
    schedule_id TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    created_ms INTEGER NOT NULL
) WITHOUT ROWID;
"""

_V8_TOOL_OUTPUTS = """
CREATE TABLE IF NOT EXISTS tool_outputs (
    blob_id TEXT NOT NULL UNIQUE,
    timeline_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    json INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_outputs_row ON tool_outputs (timeline_id, seq);
"""

_V9_TURN_USAGE = """
CREATE TABLE IF NOT EXISTS turn_usage (
    agent_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    ended_ms INTEGER NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS turn_usage_by_end ON turn_usage (ended_ms);
"""

_V10_SCHEDULES_TABLE = """
CREATE TABLE schedules_v10 (
    schedule_id TEXT PRIMARY KEY,
    record BLOB NOT NULL,
    created_ms INTEGER NOT NULL
) WITHOUT ROWID;
"""


def _v10_schedules_in_storage_format(conn: sqlite3.Connection) -> None:
    rows = [
        (schedule_id, _v10_schedule_record(record), created_ms)
        for schedule_id, record, created_ms in conn.execute(
            "SELECT schedule_id, record, created_ms FROM schedules"
        )
    ]
    conn.execute(_V10_SCHEDULES_TABLE)
    conn.executemany("INSERT INTO schedules_v10 VALUES (?, ?, ?)", rows)
    conn.execute("DROP TABLE schedules")
    conn.execute("ALTER TABLE schedules_v10 RENAME TO schedules")


def _v10_schedule_record(record: str | bytes) -> str | bytes:
    if not isinstance(record, str):
        return record  # rewritten already
    try:
        return schedules.encode_schedule(schedule_json.decode_json_schedule(record))
    except Exception:  # kept as it is: the loader refuses it
        return record


# The cluster's read model (cluster/follower.py): how far this node applied the stream
# (its incarnation and sequence), and the node of each agent's last claim in it.
_V12_CLUSTER = """
CREATE TABLE IF NOT EXISTS cluster_followed (
    stream TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cluster_owners (
    agent_id TEXT PRIMARY KEY,
    node TEXT NOT NULL
) WITHOUT ROWID;
"""


MIGRATIONS: tuple[Migration, ...] = (
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _records_in_storage_format,
    _V7_SCHEDULES,
    _V8_TOOL_OUTPUTS,
    _V9_TURN_USAGE,
    _v10_schedules_in_storage_format,
    events_as_runs,
    _V12_CLUSTER,
)

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Take the database on `conn` (the writer's) to SCHEMA_VERSION; the version it had (0: a
    new database). Raises StoreUnavailable (unreadable, or a migration failed: that one rolled
    back) or SchemaTooNew."""
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error as exc:
        raise StoreUnavailable(path, why(exc)) from None
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(path, version, SCHEMA_VERSION)
    for target in range(version + 1, SCHEMA_VERSION + 1):
        try:
            _run(conn, MIGRATIONS[target - 1], target)
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise StoreUnavailable(
                path, f"migrating from version {target - 1} to {target}: {why(exc)}"
            ) from None
    return version


def _run(conn: sqlite3.Connection, step: Migration, target: int) -> None:
    """One migration and its version bump, in one transaction."""
    if isinstance(step, str):
        conn.executescript(f"BEGIN IMMEDIATE;\n{step}\nPRAGMA user_version = {target};\nCOMMIT;")
        return
    conn.execute("BEGIN IMMEDIATE")
    step(conn)
    conn.execute(f"PRAGMA user_version = {target}")
    conn.execute("COMMIT")
