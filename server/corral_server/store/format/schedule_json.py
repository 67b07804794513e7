"""The JSON text a schedule's record was stored as before the storage format had a message for
it: read once, by schema.py's migration, which rewrites every such record as schedules.py's
message. Nothing else reads it."""

from __future__ import annotations

import json

from corral_server.domain.schedules import (
    Schedule,
    ScheduleId,
    ScheduleOutcome,
    ScheduleRun,
    Timing,
)
from corral_server.domain.specs import CreateSpec, IfRunning
from corral_server.domain.workspace import WorktreeRequest


def decode_json_schedule(text: str) -> Schedule:
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
