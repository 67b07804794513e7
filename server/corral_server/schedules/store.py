"""Where schedules are kept: in memory (a daemon without a state directory), or in the
database's `schedules` table (store/schema.py), one JSON record per schedule, written whole.

Must not: run SQLite on the event loop (Database.write and read run it in their threads).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Protocol

from corral_server.domain.schedules import (
    Schedule,
    ScheduleId,
    ScheduleOutcome,
    ScheduleRun,
    Timing,
)
from corral_server.domain.workspace import WorktreeRequest
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import IfRunning
from corral_server.store.database import Database


class ScheduleStore(Protocol):
    async def put(self, schedule: Schedule) -> None: ...

    async def delete(self, schedule_id: str) -> None: ...

    async def load(self) -> list[Schedule]: ...


class InMemorySchedules:
    def __init__(self) -> None:
        self._records: dict[str, str] = {}

    async def put(self, schedule: Schedule) -> None:
        self._records[schedule.id] = encode(schedule)

    async def delete(self, schedule_id: str) -> None:
        self._records.pop(schedule_id, None)

    async def load(self) -> list[Schedule]:
        return [decode(record) for record in self._records.values()]


_UPSERT = (
    "INSERT INTO schedules (schedule_id, record, created_ms) VALUES (?, ?, ?)"
    " ON CONFLICT (schedule_id) DO UPDATE SET record = excluded.record"
)


class SqliteSchedules:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def put(self, schedule: Schedule) -> None:
        row = (schedule.id, encode(schedule), schedule.created_at_ms)
        await self._db.write(lambda conn: conn.execute(_UPSERT, row))

    async def delete(self, schedule_id: str) -> None:
        await self._db.write(
            lambda conn: conn.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,))
        )

    async def load(self) -> list[Schedule]:
        return await self._db.read(_load)


def _load(conn: sqlite3.Connection) -> list[Schedule]:
    rows = conn.execute("SELECT record FROM schedules ORDER BY created_ms, schedule_id")
    return [decode(record) for (record,) in rows]


# --- the JSON record -----------------------------------------------------------------------


def encode(schedule: Schedule) -> str:
    record: dict[str, Any] = {
        "id": schedule.id,
        "prompt": schedule.prompt,
        "cron": schedule.timing.cron,
        "interval_ms": schedule.timing.interval_ms,
        "time_zone": schedule.timing.time_zone,
        "if_running": schedule.if_running.value,
        "created_at_ms": schedule.created_at_ms,
        "next_run_ms": schedule.next_run_ms,
        "agent_id": schedule.agent_id,
        "paused": schedule.paused,
        "run_count": schedule.run_count,
    }
    if schedule.create is not None:
        record["create"] = _spec(schedule.create)
    if (run := schedule.last_run) is not None:
        record["last_run"] = {
            "due_ms": run.due_ms,
            "ran_ms": run.ran_ms,
            "outcome": run.outcome.value,
            "agent_id": run.agent_id,
            "turn_id": run.turn_id,
            "error": run.error,
            "catch_up": run.catch_up,
            "missed": run.missed,
        }
    return json.dumps(record, ensure_ascii=False)


def _spec(spec: CreateSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "provider": spec.provider,
        "cwd": spec.cwd,
        "model": spec.model,
        "mode": spec.mode,
        "title": spec.title,
        "labels": dict(spec.labels),
    }
    if spec.worktree is not None:
        out["worktree"] = {"branch": spec.worktree.branch, "base": spec.worktree.base}
    return out


def decode(text: str) -> Schedule:
    r = json.loads(text)
    create = None
    if (c := r.get("create")) is not None:
        tree = c.get("worktree")
        create = CreateSpec(
            provider=c["provider"],
            cwd=c["cwd"],
            model=c["model"],
            mode=c["mode"],
            title=c["title"],
            labels=c["labels"],
            worktree=WorktreeRequest(tree["branch"], tree["base"]) if tree else None,
        )
    run = None
    if (lr := r.get("last_run")) is not None:
        run = ScheduleRun(**{**lr, "outcome": ScheduleOutcome(lr["outcome"])})
    return Schedule(
        id=ScheduleId(r["id"]),
        prompt=r["prompt"],
        timing=Timing(r["cron"], r["interval_ms"], r["time_zone"]),
        if_running=IfRunning(r["if_running"]),
        created_at_ms=r["created_at_ms"],
        next_run_ms=r["next_run_ms"],
        agent_id=r["agent_id"],
        create=create,
        paused=r["paused"],
        last_run=run,
        run_count=r["run_count"],
    )
