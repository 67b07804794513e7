"""The database schema and its migrations (PRAGMA user_version = how many have run).

`MIGRATIONS[i]` takes a database from version i to i + 1; each runs in one transaction with
the version bump, so a crash or a full disk mid-migration leaves the previous version intact.
A database whose version is above `len(MIGRATIONS)` was written by a newer corral and is
refused (never downgraded). Append new migrations; never edit a released one.

Version 1 creates every table issue 6 needs, though only `meta`, `timelines` and
`timeline_rows` have code behind them yet:

meta             key -> text value: small facts about the whole store, e.g.
                 'event_log_incarnation' (Subscribe revisions restart only with a new one).
agents           agent_id -> its record (an encoded snapshot, opaque here) and when it was
                 last written; start-up reads this table, never the rows.
timelines        one row per agent timeline, its head: the epoch, next_seq (the seq the next
                 row gets) and first_seq (the oldest retained seq; next_seq when none is). The
                 store keeps all heads in memory, loaded from here at open. `timeline_id` is
                 the short key of (agent, epoch) in timeline_rows: a rebase takes a new one.
timeline_rows    the rows of each (agent, epoch): keyed by (timeline_id, seq), so a page is
                 one range scan of the primary key, whatever the timeline's length (no OFFSET).
                 `item` is the encoded TimelineItem (the rpc layer's codec: the wire's bytes).
events           the event log behind Subscribe: revision -> the agent it concerns ('' for
                 none) and the encoded event; retention trims the oldest revisions.
create_requests  CreateAgent request ids -> the agent they created and an encoded fingerprint
                 of the request, so a retry returns the same agent and a reuse is detected.
finished_turns   (agent, turn id) of every finished turn: a late provider event for one of
                 them is dropped instead of starting a ghost turn.

Version 2 adds `agents.created_order`: the order of each agent's first record, so start-up
lists agents in creation order as the daemon did before the restart (created_at_ms ties
within a millisecond, and agent ids are random). A record written again keeps its order.

Version 3 adds `subagent_runs`: run_id -> the run's record (JSON, subagents/codec.py, opaque
here) and the order of its first write, so start-up restores runs in spawn order.

Version 4 adds `queued_prompts`: the content of each prompt an agent holds queued, one row per
content part (a text part's UTF-8 in `text`, an image's type and bytes), keyed by agent,
client_message_id and part. The agent record keeps only each queued prompt's summary, so a
prompt is stored once, not again with every rewrite of its agent's record
(store/queued_prompts.py). A rowid table: a part can be megabytes, too big for a WITHOUT ROWID
row.

Version 5 adds `timeline_text`, the FTS5 full-text index of the timelines' rows (rowid =
timeline_id * 2**32 + seq; store/search.py), and the 'search_backfill' cursor in `meta`: the
rows a database from before v5 holds are indexed in the background after start-up.

Version 6 adds `turn_usage`: one row per completed turn that reported usage (tokens, cost,
the agent's provider and model, when it ended), so usage adds up by agent, provider, model and
day (store/usage.py). A database from before v6 starts it empty: turns completed before the
upgrade are not in it (their agents' `usage_total` starts from zero too).
"""

from __future__ import annotations

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

_V6 = """
CREATE TABLE turn_usage (
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
CREATE INDEX turn_usage_by_end ON turn_usage (ended_ms);
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6)

SCHEMA_VERSION = len(MIGRATIONS)
