"""A sub-agent run's record: the domain `SubagentRun` <-> corral.storage.v1.SubagentRun bytes.

Every field of the run, nothing derived. The enums are stored as numbers of their own
(0 = unset, refused for the ones a run always has), so renaming a domain value never changes
the disk; an outcome is stored only once the run ended.
"""

from __future__ import annotations

from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from corral.storage.v1 import records_pb2 as pb
from corral_server.domain.subagents import (
    AnnounceState,
    Cleanup,
    Delivering,
    Outcome,
    RunId,
    SubagentRun,
)
from corral_server.store.format.agents import usage, usage_record

T = TypeVar("T")

_CLEANUP = {Cleanup.KEEP: pb.CLEANUP_KEEP, Cleanup.DELETE: pb.CLEANUP_DELETE}
_OUTCOME = {
    Outcome.OK: pb.OUTCOME_OK,
    Outcome.ERROR: pb.OUTCOME_ERROR,
    Outcome.TIMEOUT: pb.OUTCOME_TIMEOUT,
    Outcome.KILLED: pb.OUTCOME_KILLED,
    Outcome.UNKNOWN: pb.OUTCOME_UNKNOWN,
}
_ANNOUNCE = {
    AnnounceState.NOT_DUE: pb.ANNOUNCE_STATE_NOT_DUE,
    AnnounceState.PENDING: pb.ANNOUNCE_STATE_PENDING,
    AnnounceState.DEFERRED: pb.ANNOUNCE_STATE_DEFERRED,
    AnnounceState.DELIVERED: pb.ANNOUNCE_STATE_DELIVERED,
    AnnounceState.SUPPRESSED: pb.ANNOUNCE_STATE_SUPPRESSED,
    AnnounceState.GIVEN_UP: pb.ANNOUNCE_STATE_GIVEN_UP,
}
_CLEANUP_BACK = {stored: value for value, stored in _CLEANUP.items()}
_OUTCOME_BACK = {stored: value for value, stored in _OUTCOME.items()}
_ANNOUNCE_BACK = {stored: value for value, stored in _ANNOUNCE.items()}


def encode_run(run: SubagentRun) -> bytes:
    record = pb.SubagentRun(
        run_id=run.run_id,
        child_agent_id=run.child_agent_id,
        requester_agent_id=run.requester_agent_id,
        controller_agent_id=run.controller_agent_id,
        task=run.task,
        created_at_ms=run.created_at_ms,
        depth=run.depth,
        label=run.label,
        cleanup=_CLEANUP[run.cleanup],
        run_timeout_s=run.run_timeout_s,
        expects_completion_message=run.expects_completion_message,
        started_at_ms=run.started_at_ms,
        ended_at_ms=run.ended_at_ms,
        outcome=pb.OUTCOME_UNSPECIFIED if run.outcome is None else _OUTCOME[run.outcome],
        end_reason=run.end_reason,
        result_text=run.result_text,
        usage=None if run.usage is None else usage_record(run.usage),
        announce_state=_ANNOUNCE[run.announce_state],
        deferred_since_ms=run.deferred_since_ms,
        attempts=run.attempts,
        announced_at_ms=run.announced_at_ms,
    )
    if run.delivering is not None:
        record.delivering.epoch = run.delivering.epoch
        record.delivering.from_seq = run.delivering.from_seq
    return record.SerializeToString()


def decode_run(data: bytes) -> SubagentRun:
    try:
        r = pb.SubagentRun.FromString(data)
    except DecodeError as exc:
        raise ValueError(f"not an encoded run: {exc}") from exc
    if not r.run_id:
        raise ValueError("a run without an id")
    return SubagentRun(
        run_id=RunId(r.run_id),
        child_agent_id=r.child_agent_id,
        requester_agent_id=r.requester_agent_id,
        controller_agent_id=r.controller_agent_id,
        task=r.task,
        created_at_ms=r.created_at_ms,
        depth=r.depth,
        label=r.label,
        cleanup=_known(_CLEANUP_BACK, r.cleanup, "cleanup"),
        run_timeout_s=r.run_timeout_s,
        expects_completion_message=r.expects_completion_message,
        started_at_ms=r.started_at_ms if r.HasField("started_at_ms") else None,
        ended_at_ms=r.ended_at_ms if r.HasField("ended_at_ms") else None,
        outcome=_known(_OUTCOME_BACK, r.outcome, "outcome") if r.outcome else None,
        end_reason=r.end_reason,
        result_text=r.result_text,
        usage=usage(r.usage) if r.HasField("usage") else None,
        announce_state=_known(_ANNOUNCE_BACK, r.announce_state, "announce state"),
        deferred_since_ms=r.deferred_since_ms if r.HasField("deferred_since_ms") else None,
        attempts=r.attempts,
        delivering=(
            Delivering(r.delivering.epoch, r.delivering.from_seq)
            if r.HasField("delivering")
            else None
        ),
        announced_at_ms=r.announced_at_ms if r.HasField("announced_at_ms") else None,
    )


def _known(values: dict[Any, T], number: int, what: str) -> T:
    try:
        return values[number]
    except KeyError:
        raise ValueError(f"a run with an unknown {what} ({number})") from None
