"""The store's on-disk encoding: domain values <-> corral.storage.v1 messages
(proto/corral/storage/v1/records.proto), in this package and nowhere else.

  agents.py    an agent's record (the `agents` table's blob), queued prompts as summaries
  runs.py      a sub-agent run's record (the `subagent_runs` table's blob)
  schedules.py a schedule's record (the `schedules` table's blob)
  common.py    what they share: parsing a blob, stored enum numbers, times, usage
  run_json.py  the JSON runs were stored as before the format had messages (schema.py's
               migration rewrites them; nothing else reads it)
  schedule_json.py  the JSON text schedules were stored as before (likewise)

Timeline items (the `timeline_rows.item` blob) need no module here: a stored item is the
corral.storage.v1.TimelineItem encoding, which is byte for byte the corral.v1.TimelineItem the
writer streams, so the writer encodes each item once for both (rpc/item_codec.py is the codec
it injects). tests/unit/store/test_storage_format.py pins the two messages wire-compatible; the
day an API change breaks that test, the stored item gets a translation of its own here.

The format is versioned with the database: a change of these messages is a migration
(schema.py), never a side effect of an API change.

Must not: import corral.v1 or grpc (the API's messages are the rpc edge's), or SQLite.
"""
