"""The JSON a run's record was stored as before the storage format had messages: read once,
by schema.py's migration, which rewrites every such record as runs.py's message. A key missing
from an old record reads back with its default.
"""

from __future__ import annotations

import json

from corral_server.domain import subagents as ds
from corral_server.domain.agent import Usage


def decode_json_run(data: bytes) -> ds.SubagentRun:
    f = json.loads(data)
    usage = f.get("usage")
    delivering = f.get("delivering")
    outcome = f.get("outcome")
    return ds.SubagentRun(
        run_id=ds.RunId(str(f["run_id"])),
        child_agent_id=str(f["child_agent_id"]),
        requester_agent_id=str(f["requester_agent_id"]),
        controller_agent_id=str(f["controller_agent_id"]),
        task=str(f["task"]),
        created_at_ms=int(f["created_at_ms"]),
        depth=int(f["depth"]),
        label=str(f.get("label", "")),
        cleanup=ds.Cleanup(f.get("cleanup", "keep")),
        run_timeout_s=int(f.get("run_timeout_s", 0)),
        expects_completion_message=bool(f.get("expects_completion_message", False)),
        started_at_ms=_int_or_none(f.get("started_at_ms")),
        ended_at_ms=_int_or_none(f.get("ended_at_ms")),
        outcome=None if outcome is None else ds.Outcome(outcome),
        end_reason=str(f.get("end_reason", "")),
        result_text=str(f.get("result_text", "")),
        usage=None
        if usage is None
        else Usage(int(usage[0]), int(usage[1]), int(usage[2]), float(usage[3])),
        announce_state=ds.AnnounceState(f.get("announce_state", "not_due")),
        deferred_since_ms=_int_or_none(f.get("deferred_since_ms")),
        attempts=int(f.get("attempts", 0)),
        delivering=None
        if delivering is None
        else ds.Delivering(str(delivering[0]), int(delivering[1])),
        announced_at_ms=_int_or_none(f.get("announced_at_ms")),
    )


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(str(value))
