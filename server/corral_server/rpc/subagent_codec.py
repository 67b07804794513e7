"""Sub-agent runs between the domain (subagents/) and corral.v1 (subagent.proto)."""

from __future__ import annotations

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as svc_pb
from corral_server.domain.subagents import AnnounceState, Cleanup, Outcome, SubagentRun
from corral_server.rpc.items import timestamp
from corral_server.subagents.limits import SpawnRequest

_OUTCOME = {
    Outcome.OK: sub_pb.SUBAGENT_OUTCOME_OK,
    Outcome.ERROR: sub_pb.SUBAGENT_OUTCOME_ERROR,
    Outcome.TIMEOUT: sub_pb.SUBAGENT_OUTCOME_TIMEOUT,
    Outcome.KILLED: sub_pb.SUBAGENT_OUTCOME_KILLED,
    Outcome.UNKNOWN: sub_pb.SUBAGENT_OUTCOME_UNKNOWN,
}
_CLEANUP = {
    Cleanup.KEEP: sub_pb.SUBAGENT_CLEANUP_KEEP,
    Cleanup.DELETE: sub_pb.SUBAGENT_CLEANUP_DELETE,
}
CLEANUP_FROM_PB = {v: k for k, v in _CLEANUP.items()} | {
    sub_pb.SUBAGENT_CLEANUP_UNSPECIFIED: Cleanup.KEEP
}
_ANNOUNCE = {
    AnnounceState.NOT_DUE: sub_pb.ANNOUNCE_STATE_NOT_DUE,
    AnnounceState.PENDING: sub_pb.ANNOUNCE_STATE_PENDING,
    AnnounceState.DEFERRED: sub_pb.ANNOUNCE_STATE_DEFERRED,
    AnnounceState.DELIVERED: sub_pb.ANNOUNCE_STATE_DELIVERED,
    AnnounceState.SUPPRESSED: sub_pb.ANNOUNCE_STATE_SUPPRESSED,
    AnnounceState.GIVEN_UP: sub_pb.ANNOUNCE_STATE_GIVEN_UP,
}


def run_to_pb(run: SubagentRun) -> sub_pb.SubagentRun:
    out = sub_pb.SubagentRun(
        run_id=run.run_id,
        child_agent_id=run.child_agent_id,
        requester_agent_id=run.requester_agent_id,
        controller_agent_id=run.controller_agent_id,
        task=run.task,
        label=run.label,
        end_reason=run.end_reason,
        created_at=timestamp(run.created_at_ms),
        result_text=run.result_text,
        announce_state=_ANNOUNCE[run.announce_state],
        cleanup=_CLEANUP[run.cleanup],
        run_timeout_s=run.run_timeout_s,
        expects_completion_message=run.expects_completion_message,
        depth=run.depth,
    )
    if run.outcome is not None:
        out.outcome = _OUTCOME[run.outcome]
    if run.started_at_ms is not None:
        out.started_at.CopyFrom(timestamp(run.started_at_ms))
    if run.ended_at_ms is not None:
        out.ended_at.CopyFrom(timestamp(run.ended_at_ms))
    if run.usage is not None:
        u = run.usage
        out.usage.CopyFrom(
            agent_pb.Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cached_input_tokens=u.cached_input_tokens,
                cost_usd=u.cost_usd,
            )
        )
    return out


def spawn_from_pb(request: svc_pb.SpawnSubagentRequest) -> SpawnRequest:
    return SpawnRequest(
        requester_agent_id=request.requester_agent_id,
        task=request.task,
        provider=request.provider,
        model=request.model,
        label=request.label,
        cleanup=CLEANUP_FROM_PB.get(request.cleanup, Cleanup.KEEP),
        run_timeout_s=request.run_timeout_s,
        expects_completion_message=request.expects_completion_message,
        controller_agent_id=request.controller_agent_id,
    )
