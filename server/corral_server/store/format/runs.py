"""A sub-agent run's record: the domain `SubagentRun` <-> corral.storage.v1.SubagentRun bytes.

Every field of the run, nothing derived; most are stored as they are (`_SAME`, `_OPTIONAL`:
an unset optional field is the domain's None). The enums are stored as numbers of their own
(0 = unset, refused for the ones a run always has), so renaming a domain value never changes
the disk; an outcome is stored only once the run ended.
"""

from __future__ import annotations

from typing import Any, Literal

from corral.storage.v1 import records_pb2 as pb
from corral_server.domain import subagents as ds
from corral_server.store.format.common import known, parse, usage, usage_record

_SAME = (
    "run_id",
    "child_agent_id",
    "requester_agent_id",
    "controller_agent_id",
    "task",
    "created_at_ms",
    "depth",
    "label",
    "run_timeout_s",
    "expects_completion_message",
    "end_reason",
    "result_text",
    "attempts",
)
_OPTIONAL: tuple[
    Literal["started_at_ms", "ended_at_ms", "deferred_since_ms", "announced_at_ms"], ...
] = (
    "started_at_ms",
    "ended_at_ms",
    "deferred_since_ms",
    "announced_at_ms",
)

_CLEANUP = {ds.Cleanup.KEEP: pb.CLEANUP_KEEP, ds.Cleanup.DELETE: pb.CLEANUP_DELETE}
_OUTCOME = {
    ds.Outcome.OK: pb.OUTCOME_OK,
    ds.Outcome.ERROR: pb.OUTCOME_ERROR,
    ds.Outcome.TIMEOUT: pb.OUTCOME_TIMEOUT,
    ds.Outcome.KILLED: pb.OUTCOME_KILLED,
    ds.Outcome.UNKNOWN: pb.OUTCOME_UNKNOWN,
}
_ANNOUNCE = {
    ds.AnnounceState.NOT_DUE: pb.ANNOUNCE_STATE_NOT_DUE,
    ds.AnnounceState.PENDING: pb.ANNOUNCE_STATE_PENDING,
    ds.AnnounceState.DEFERRED: pb.ANNOUNCE_STATE_DEFERRED,
    ds.AnnounceState.DELIVERED: pb.ANNOUNCE_STATE_DELIVERED,
    ds.AnnounceState.SUPPRESSED: pb.ANNOUNCE_STATE_SUPPRESSED,
    ds.AnnounceState.GIVEN_UP: pb.ANNOUNCE_STATE_GIVEN_UP,
}
_CLEANUP_BACK = {stored: value for value, stored in _CLEANUP.items()}
_OUTCOME_BACK = {stored: value for value, stored in _OUTCOME.items()}
_ANNOUNCE_BACK = {stored: value for value, stored in _ANNOUNCE.items()}


def encode_run(run: ds.SubagentRun) -> bytes:
    record = pb.SubagentRun(**{name: getattr(run, name) for name in (*_SAME, *_OPTIONAL)})
    record.cleanup = _CLEANUP[run.cleanup]
    record.announce_state = _ANNOUNCE[run.announce_state]
    if run.outcome is not None:
        record.outcome = _OUTCOME[run.outcome]
    if run.usage is not None:
        record.usage.CopyFrom(usage_record(run.usage))
    if run.delivering is not None:
        record.delivering.epoch = run.delivering.epoch
        record.delivering.from_seq = run.delivering.from_seq
    return record.SerializeToString()


def decode_run(data: bytes) -> ds.SubagentRun:
    r = parse(pb.SubagentRun, data, "run")
    if not r.run_id:
        raise ValueError("a run without an id")
    fields: dict[str, Any] = {name: getattr(r, name) for name in _SAME}
    fields.update({name: getattr(r, name) if r.HasField(name) else None for name in _OPTIONAL})
    delivering = r.delivering if r.HasField("delivering") else None
    return ds.SubagentRun(
        **fields,
        cleanup=known(_CLEANUP_BACK, r.cleanup, "run", "cleanup"),
        outcome=known(_OUTCOME_BACK, r.outcome, "run", "outcome") if r.outcome else None,
        usage=usage(r.usage) if r.HasField("usage") else None,
        announce_state=known(_ANNOUNCE_BACK, r.announce_state, "run", "announce state"),
        delivering=None
        if delivering is None
        else ds.Delivering(delivering.epoch, delivering.from_seq),
    )
