"""Writes the old state directory (old_state/corral.db.gz) with the code of an older corral.

Run it with that checkout's code first on the path, from this checkout's root:

    PYTHONPATH=/path/to/old/server:/path/to/old/clients/python:. \\
        .venv/bin/python -m tests.unit.store.old_state.make tests/unit/store/old_state

The committed file was made from the commit before the storage format had messages of its own
(schema version 5: agents as corral.v1.Agent, runs as JSON, items as corral.v1 wire bytes). The
old modules are imported by name: this checkout no longer has them.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tests.unit.store.old_state import sample as s


def _old(module: str) -> Any:
    return importlib.import_module(module)


async def _write(state: Path) -> None:
    store = _old("corral_server.store")
    agent_codec = _old("corral_server.rpc.agent_codec")
    run_codec = _old("corral_server.subagents.codec")
    item_codec = _old("corral_server.rpc.item_codec").ITEM_CODEC
    runs = _old("corral_server.store.subagent_runs")
    db = await store.Database.open(state, synchronous="FULL")
    try:
        epochs = iter(a.epoch for a in s.AGENTS)
        timeline = await store.SqliteTimelineStore.open(
            db, item_codec, epoch_factory=lambda: next(epochs), search_index=True
        )
        records = await store.SqliteAgentRecords.open(
            db, agent_codec.encode_agent, agent_codec.decode_agent
        )
        for agent in s.AGENTS:
            await timeline.create(agent.id)
            await records.put(agent)
        await timeline.append(s.PARENT.id, s.PARENT_ROWS)
        await timeline.set_provider_message_id(s.PARENT.id, *s.PARENT_PROVIDER_MESSAGE_ID)
        await timeline.append(s.CHILD.id, s.CHILD_ROWS)
        run_store = await runs.SqliteRunStore.open(db, run_codec.encode_run, run_codec.decode_run)
        for run in s.RUNS:
            await run_store.put(run)
        log = await store.SqliteEventLog.open(db, mint=lambda: s.INCARNATION)
        await log.append_many([_old("corral_server.records").LogEntry(*e) for e in s.EVENTS])
        await store.SqliteCreateRequests(db).remember(*s.CREATE_REQUEST)
        turns = store.SqliteFinishedTurns(db)
        for agent_id, turn_id in s.FINISHED_TURNS:
            await turns.add(agent_id, turn_id)
    finally:
        await db.close()


def make(write: Callable[[Path], Coroutine[Any, Any, None]], out: Path) -> None:
    """A state directory written by `write`, its database vacuumed and gzipped to `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        asyncio.run(write(state))
        conn = sqlite3.connect(state / "corral.db")
        conn.execute("VACUUM")
        conn.close()
        data = (state / "corral.db").read_bytes()
    out.write_bytes(gzip.compress(data, mtime=0))
    print(f"wrote {out} ({len(data):,} bytes, gzipped)")


def main(out: Path) -> None:
    make(_write, out / "corral.db.gz")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
