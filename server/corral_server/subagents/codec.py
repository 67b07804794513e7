"""A run record as JSON bytes, for the durable store (which stores them opaque). Versioned by
the key set: a field added later reads back with its default.

Must not: import protobuf (the stored form is the domain's, not the wire's).
"""

from __future__ import annotations

import json
from typing import Any

from corral_server.domain.agent import Usage
from corral_server.domain.subagents import (
    AnnounceState,
    Cleanup,
    Delivering,
    Outcome,
    RunId,
    SubagentRun,
)


def encode_run(run: SubagentRun) -> bytes:
    usage = run.usage
    fields: dict[str, Any] = {
        "run_id": run.run_id,
        "child_agent_id": run.child_agent_id,
        "requester_agent_id": run.requester_agent_id,
        "controller_agent_id": run.controller_agent_id,
        "task": run.task,
        "created_at_ms": run.created_at_ms,
        "depth": run.depth,
        "label": run.label,
        "cleanup": run.cleanup.value,
        "run_timeout_s": run.run_timeout_s,
        "expects_completion_message": run.expects_completion_message,
        "started_at_ms": run.started_at_ms,
        "ended_at_ms": run.ended_at_ms,
        "outcome": None if run.outcome is None else run.outcome.value,
        "end_reason": run.end_reason,
        "result_text": run.result_text,
        "usage": None
        if usage is None
        else [usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd],
        "announce_state": run.announce_state.value,
        "deferred_since_ms": run.deferred_since_ms,
        "attempts": run.attempts,
        "delivering": None
        if run.delivering is None
        else [run.delivering.epoch, run.delivering.from_seq],
        "announced_at_ms": run.announced_at_ms,
    }
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def decode_run(data: bytes) -> SubagentRun:
    f = json.loads(data)
    usage = f.get("usage")
    delivering = f.get("delivering")
    outcome = f.get("outcome")
    return SubagentRun(
        run_id=RunId(str(f["run_id"])),
        child_agent_id=str(f["child_agent_id"]),
        requester_agent_id=str(f["requester_agent_id"]),
        controller_agent_id=str(f["controller_agent_id"]),
        task=str(f["task"]),
        created_at_ms=int(f["created_at_ms"]),
        depth=int(f["depth"]),
        label=str(f.get("label", "")),
        cleanup=Cleanup(f.get("cleanup", "keep")),
        run_timeout_s=int(f.get("run_timeout_s", 0)),
        expects_completion_message=bool(f.get("expects_completion_message", False)),
        started_at_ms=_int_or_none(f.get("started_at_ms")),
        ended_at_ms=_int_or_none(f.get("ended_at_ms")),
        outcome=None if outcome is None else Outcome(outcome),
        end_reason=str(f.get("end_reason", "")),
        result_text=str(f.get("result_text", "")),
        usage=None
        if usage is None
        else Usage(int(usage[0]), int(usage[1]), int(usage[2]), float(usage[3])),
        announce_state=AnnounceState(f.get("announce_state", "not_due")),
        deferred_since_ms=_int_or_none(f.get("deferred_since_ms")),
        attempts=int(f.get("attempts", 0)),
        delivering=None
        if delivering is None
        else Delivering(str(delivering[0]), int(delivering[1])),
        announced_at_ms=_int_or_none(f.get("announced_at_ms")),
    )


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(str(value))
