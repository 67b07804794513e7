"""Domain <-> protobuf translation, in one place. Round-trips are pinned by tests.

Everything inward of the rpc edge speaks domain types; everything outward speaks corral.v1.
"""

from __future__ import annotations

from typing import assert_never

from google.protobuf import json_format, struct_pb2

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.domain import agent as da
from corral_server.domain import events as de
from corral_server.domain import timeline as dt
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.domain.notification import NotifyKind
from corral_server.manager.permissions import MAX_INPUT_BYTES
from corral_server.rpc.items import cursor_from_pb as cursor_from_pb
from corral_server.rpc.items import cursor_to_pb as cursor_to_pb
from corral_server.rpc.items import item_from_pb as item_from_pb
from corral_server.rpc.items import item_to_pb as item_to_pb
from corral_server.rpc.items import json_from_value as json_from_value
from corral_server.rpc.items import json_value as json_value
from corral_server.rpc.items import row_from_pb as row_from_pb
from corral_server.rpc.items import row_to_pb as row_to_pb
from corral_server.rpc.items import timestamp as timestamp
from corral_server.rpc.items import timestamp_ms as timestamp_ms
from corral_server.rpc.schedule_codec import run_to_pb as schedule_run_to_pb
from corral_server.rpc.subagent_codec import run_to_pb
from corral_server.rpc.wire import row_appended_event as _wire_row_appended
from corral_server.rpc.workspace_codec import workspace_to_pb

# --- content ------------------------------------------------------------------------------


def prompt_from_pb(parts: list[content_pb.ContentPart]) -> Prompt:
    """Empty parts (neither text nor image) are dropped; the caller validates emptiness."""
    out: list[TextPart | ImagePart] = []
    for part in parts:
        which = part.WhichOneof("part")
        if which == "text":
            out.append(TextPart(part.text))
        elif which == "image":
            out.append(ImagePart(part.image.mime_type, part.image.data))
    return tuple(out)


def prompt_to_pb(prompt: Prompt) -> list[content_pb.ContentPart]:
    out = []
    for part in prompt:
        match part:
            case TextPart(text=text):
                out.append(content_pb.ContentPart(text=text))
            case ImagePart(mime_type=mime, data=data):
                out.append(
                    content_pb.ContentPart(image=content_pb.Image(mime_type=mime, data=data))
                )
            case _:
                assert_never(part)
    return out


# --- agents -------------------------------------------------------------------------------

_REASON = {
    da.AttentionReason.FINISHED: agent_pb.ATTENTION_REASON_FINISHED,
    da.AttentionReason.ERROR: agent_pb.ATTENTION_REASON_ERROR,
    da.AttentionReason.PERMISSION: agent_pb.ATTENTION_REASON_PERMISSION,
}

_TITLE_SOURCE = {
    da.TitleSource.NONE: agent_pb.TITLE_SOURCE_UNSPECIFIED,
    da.TitleSource.PROMPT: agent_pb.TITLE_SOURCE_PROMPT,
    da.TitleSource.PROVIDER: agent_pb.TITLE_SOURCE_PROVIDER,
    da.TitleSource.USER: agent_pb.TITLE_SOURCE_USER,
}


def attention_reason(reason: da.AttentionReason | None) -> agent_pb.AttentionReason.ValueType:
    return _REASON[reason] if reason is not None else agent_pb.ATTENTION_REASON_UNSPECIFIED


def error_to_pb(error: da.AgentError) -> agent_pb.AgentError:
    return agent_pb.AgentError(message=error.message, code=error.code)


def usage_to_pb(usage: da.Usage) -> agent_pb.Usage:
    return agent_pb.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        cost_usd=usage.cost_usd,
    )


def lifecycle_to_pb(lifecycle: da.Lifecycle) -> agent_pb.AgentLifecycle:
    L = agent_pb.AgentLifecycle
    match lifecycle:
        case da.Initializing():
            return L(initializing=L.Initializing())
        case da.Idle():
            return L(idle=L.Idle())
        case da.Running(active_turn_id=turn_id):
            return L(running=L.Running(active_turn_id=turn_id))
        case da.Errored(error=error):
            return L(errored=L.Errored(error=error_to_pb(error)))
        case da.Closed(closed_at_ms=at):
            return L(closed=L.Closed(closed_at=timestamp(at)))
        case _:
            assert_never(lifecycle)


def struct_to_dict(msg: struct_pb2.Struct) -> dict[str, dt.JsonValue]:
    return {key: json_from_value(value) for key, value in msg.fields.items()}


def permission_to_pb(p: da.PendingPermission, listed: bool = False) -> agent_pb.PendingPermission:
    """The request in full, or (`listed`) as Agent.pending_permissions shows it: a long
    input clipped to its preview."""
    preview = listed and p.input_preview is not None
    shown = p.input_preview if preview and p.input_preview is not None else p.input
    msg = agent_pb.PendingPermission(
        id=p.id,
        name=p.name,
        kind=p.kind,
        title=p.title,
        actions=[agent_pb.PermissionAction(id=a.id, label=a.label, kind=a.kind) for a in p.actions],
        turn_id=p.turn_id,
        input_clipped=preview or p.input_bytes > MAX_INPUT_BYTES,
        input_bytes=p.input_bytes,
    )
    json_format.ParseDict(dict(shown), msg.input)
    return msg


def queued_prompt_to_pb(q: da.QueuedPrompt, whole: bool = False) -> agent_pb.QueuedPrompt:
    """A queued prompt as Agent.queued_prompts lists it (its summary, the content at most its
    preview), or `whole` (GetQueuedPrompt)."""
    summary = q.summary
    if whole or not summary.clipped:
        content = prompt_to_pb(q.content)
    else:
        content = [content_pb.ContentPart(text=summary.preview)] if summary.preview else []
    return agent_pb.QueuedPrompt(
        client_message_id=q.client_message_id,
        content=content,
        queued_at=timestamp(q.queued_at_ms),
        text_bytes=summary.text_bytes,
        chars=summary.chars,
        image_count=summary.image_count,
        preview=summary.preview,
        clipped=summary.clipped and not whole,
        queued_by=q.queued_by.value,
    )


def agent_to_pb(agent: da.Agent) -> agent_pb.Agent:
    """The agent as every listing shows it: queued prompts and pending permissions as
    summaries, so that no agent outgrows a client's message limit (each prompt and request
    in full is TurnService's GetQueuedPrompt and GetPendingPermission)."""
    msg = agent_pb.Agent(
        id=agent.id,
        provider=agent.provider,
        cwd=agent.cwd,
        model=agent.model,
        mode=agent.mode,
        title=agent.title,
        labels=dict(agent.labels),
        lifecycle=lifecycle_to_pb(agent.lifecycle),
        attention=agent_pb.Attention(
            required=agent.attention.required,
            reason=attention_reason(agent.attention.reason),
            at=timestamp(agent.attention.at_ms) if agent.attention.at_ms else None,
        ),
        pending_permissions=[permission_to_pb(p, listed=True) for p in agent.pending_permissions],
        queued_prompts=[queued_prompt_to_pb(q) for q in agent.queued_prompts],
        provider_session_id=agent.provider_session_id,
        parent_agent_id=agent.parent_agent_id,
        created_at=timestamp(agent.created_at_ms),
        updated_at=timestamp(agent.updated_at_ms),
        timeline=agent_pb.TimelineInfo(epoch=agent.epoch, next_seq=agent.next_seq),
        title_source=_TITLE_SOURCE[agent.title_source],
    )
    if agent.archived_at_ms is not None:
        msg.archived_at.CopyFrom(timestamp(agent.archived_at_ms))
    if agent.last_error is not None:
        msg.last_error.CopyFrom(error_to_pb(agent.last_error))
    msg.usage_total.CopyFrom(usage_to_pb(agent.usage_total))
    if agent.last_usage is not None:
        msg.last_usage.CopyFrom(usage_to_pb(agent.last_usage))
    if agent.workspace is not None:
        msg.workspace.CopyFrom(workspace_to_pb(agent.workspace))
    return msg


# --- events -------------------------------------------------------------------------------


def turn_started_pb(e: de.TurnStarted) -> turn_pb.TurnStarted:
    return turn_pb.TurnStarted(agent_id=e.agent_id, turn_id=e.turn_id)


def turn_completed_pb(e: de.TurnCompleted) -> turn_pb.TurnCompleted:
    msg = turn_pb.TurnCompleted(agent_id=e.agent_id, turn_id=e.turn_id)
    if e.usage is not None:
        msg.usage.CopyFrom(usage_to_pb(e.usage))
    return msg


def turn_failed_pb(e: de.TurnFailed) -> turn_pb.TurnFailed:
    return turn_pb.TurnFailed(agent_id=e.agent_id, turn_id=e.turn_id, error=error_to_pb(e.error))


def turn_canceled_pb(e: de.TurnCanceled) -> turn_pb.TurnCanceled:
    return turn_pb.TurnCanceled(agent_id=e.agent_id, turn_id=e.turn_id, reason=e.reason)


_NOTIFY = {
    NotifyKind.NOBODY: event_pb.NOTIFICATION_KIND_NONE,
    NotifyKind.IN_APP: event_pb.NOTIFICATION_KIND_IN_APP,
    NotifyKind.PUSH: event_pb.NOTIFICATION_KIND_PUSH,
}

_BEHAVIOR = {
    da.PermissionBehavior.ALLOW: turn_pb.PERMISSION_BEHAVIOR_ALLOW,
    da.PermissionBehavior.DENY: turn_pb.PERMISSION_BEHAVIOR_DENY,
}
BEHAVIOR_FROM_PB = {v: k for k, v in _BEHAVIOR.items()}


def permission_resolved_pb(e: de.PermissionResolved) -> turn_pb.PermissionResolved:
    return turn_pb.PermissionResolved(
        agent_id=e.agent_id,
        turn_id=e.turn_id,
        request_id=e.request_id,
        behavior=(
            _BEHAVIOR[e.behavior]
            if e.behavior is not None
            else turn_pb.PERMISSION_BEHAVIOR_UNSPECIFIED
        ),
        canceled=e.behavior is None,
    )


# The event kinds, grouped as the functions below translate them.
_AgentEvent = de.AgentUpserted | de.AgentRemoved | de.RowAppended | de.RowUpdated | de.TimelineReset
_TurnEvent = (
    de.TurnStarted
    | de.TurnCompleted
    | de.TurnFailed
    | de.TurnCanceled
    | de.PermissionRequested
    | de.PermissionResolved
)
_FleetEvent = de.AttentionRequired | de.SubagentRunUpdated | de.ChangesUpdated | de.ScheduleFired


def event_to_pb(revision: int, event: de.Event | de.StreamControl) -> event_pb.Event:
    match event:
        case (
            de.AgentUpserted()
            | de.AgentRemoved()
            | de.RowAppended()
            | de.RowUpdated()
            | de.TimelineReset()
        ):
            return _agent_event_pb(revision, event)
        case (
            de.TurnStarted()
            | de.TurnCompleted()
            | de.TurnFailed()
            | de.TurnCanceled()
            | de.PermissionRequested()
            | de.PermissionResolved()
        ):
            return _turn_event_pb(revision, event)
        case (
            de.AttentionRequired()
            | de.SubagentRunUpdated()
            | de.ChangesUpdated()
            | de.ScheduleFired()
        ):
            return _fleet_event_pb(revision, event)
        case de.Synced() | de.SubscriptionReset() | de.StreamEnding():
            return _control_pb(revision, event)
        case _:
            assert_never(event)


def _agent_event_pb(revision: int, event: _AgentEvent) -> event_pb.Event:
    """An agent's snapshot or removal, and its timeline's changes."""
    E = event_pb.Event
    match event:
        case de.AgentUpserted(agent=agent):
            return E(
                revision=revision, agent_upserted=event_pb.AgentUpserted(agent=agent_to_pb(agent))
            )
        case de.AgentRemoved(agent_id=agent_id):
            return E(revision=revision, agent_removed=event_pb.AgentRemoved(agent_id=agent_id))
        case de.RowAppended(agent_id=agent_id, epoch=epoch, row=row):
            appended = event_pb.TimelineRowAppended(
                agent_id=agent_id, epoch=epoch, row=row_to_pb(row)
            )
            return E(revision=revision, timeline_row_appended=appended)
        case de.RowUpdated():
            updated = event_pb.TimelineRowUpdated(
                agent_id=event.agent_id,
                epoch=event.epoch,
                seq=event.seq,
                provider_message_id=event.provider_message_id,
            )
            return E(revision=revision, timeline_row_updated=updated)
        case de.TimelineReset(agent_id=agent_id, epoch=epoch, reason=reason):
            reset = event_pb.TimelineReset(agent_id=agent_id, epoch=epoch, reason=reason)
            return E(revision=revision, timeline_reset=reset)
        case _:
            assert_never(event)


def _turn_event_pb(revision: int, event: _TurnEvent) -> event_pb.Event:
    """A turn's lifecycle and its permission requests."""
    E = event_pb.Event
    match event:
        case de.TurnStarted():
            return E(revision=revision, turn_started=turn_started_pb(event))
        case de.TurnCompleted():
            return E(revision=revision, turn_completed=turn_completed_pb(event))
        case de.TurnFailed():
            return E(revision=revision, turn_failed=turn_failed_pb(event))
        case de.TurnCanceled():
            return E(revision=revision, turn_canceled=turn_canceled_pb(event))
        case de.PermissionRequested(agent_id=agent_id, turn_id=turn_id, permission=permission):
            requested = turn_pb.PermissionRequested(
                agent_id=agent_id, turn_id=turn_id, permission=permission_to_pb(permission)
            )
            return E(revision=revision, permission_requested=requested)
        case de.PermissionResolved():
            return E(revision=revision, permission_resolved=permission_resolved_pb(event))
        case _:
            assert_never(event)


def _fleet_event_pb(revision: int, event: _FleetEvent) -> event_pb.Event:
    """Attention, sub-agent runs, a turn's changes and schedules."""
    E = event_pb.Event
    match event:
        case de.AttentionRequired(agent_id=agent_id, reason=reason, notification=plan):
            attention = event_pb.AttentionRequired(
                agent_id=agent_id,
                reason=attention_reason(reason),
                notification=event_pb.Notification(
                    kind=_NOTIFY[plan.kind], client_id=plan.client_id
                ),
            )
            return E(revision=revision, attention_required=attention)
        case de.SubagentRunUpdated(run=run):
            updated_run = event_pb.SubagentRunUpdated(
                run_id=run.run_id,
                child_agent_id=run.child_agent_id,
                requester_agent_id=run.requester_agent_id,
                run=run_to_pb(run),
            )
            return E(revision=revision, subagent_run_updated=updated_run)
        case de.ChangesUpdated():
            changes = event_pb.ChangesUpdated(
                agent_id=event.agent_id,
                files=event.files,
                lines_added=event.lines_added,
                lines_removed=event.lines_removed,
            )
            return E(revision=revision, changes_updated=changes)
        case de.ScheduleFired(schedule_id=schedule_id, run=run):
            fired = event_pb.ScheduleFired(
                schedule_id=schedule_id, agent_id=run.agent_id, run=schedule_run_to_pb(run)
            )
            return E(revision=revision, schedule_fired=fired)
        case _:
            assert_never(event)


def _control_pb(revision: int, event: de.StreamControl) -> event_pb.Event:
    """A message about the subscription itself."""
    E = event_pb.Event
    match event:
        case de.Synced(revision=synced_at, reset=reset, incarnation=incarnation):
            synced = event_pb.Synced(revision=synced_at, reset=reset, incarnation=incarnation)
            return E(revision=revision, synced=synced)
        case de.SubscriptionReset():
            sub_reset = event_pb.SubscriptionReset(
                requested_revision=event.requested_revision,
                earliest_revision=event.earliest_revision,
                reason=event.reason,
            )
            return E(revision=revision, subscription_reset=sub_reset)
        case de.StreamEnding(resume_revision=resume, reason=reason, incarnation=incarnation):
            ending = event_pb.StreamEnding(
                resume_revision=resume, reason=reason, incarnation=incarnation
            )
            return E(revision=revision, stream_ending=ending)
        case _:
            assert_never(event)


def encode_event(revision: int, event: de.Event | de.StreamControl) -> bytes:
    """The serialized corral.v1.Event: what the hub stores once for every subscriber.
    Timeline rows, by far the most numerous events, take the hand-written path."""
    if type(event) is de.RowAppended:
        return _wire_row_appended(revision, event.agent_id, event.epoch, event.row)
    return event_to_pb(revision, event).SerializeToString()
