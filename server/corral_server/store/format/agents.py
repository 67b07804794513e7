"""An agent's record: the domain `Agent` <-> corral.storage.v1.Agent bytes.

A record is the agent's full snapshot, with two things kept small because the record is
rewritten at every change of its agent: a queued prompt longer than its summary keeps only the
summary (the `queued_prompts` table holds its content), and a pending permission's long input
keeps only its preview (`input_clipped`).

Decoding is strict about what a snapshot must hold (an id, a lifecycle state, an errored
state's error) and raises ValueError naming what is missing: a record that does not decode is
reported by the store, never half-loaded. Records written before this format existed (the API's
corral.v1.Agent, whose numbers the storage message kept) decode as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, assert_never, cast

from google.protobuf import json_format

from corral.storage.v1 import records_pb2 as pb
from corral_server.domain import agent as da
from corral_server.domain.content import ImagePart, Prompt, PromptSummary, TextPart
from corral_server.domain.timeline import JsonValue
from corral_server.domain.workspace import Workspace
from corral_server.store.format.common import ms, parse, timestamp, usage, usage_record

_REASONS = (
    (da.AttentionReason.FINISHED, pb.ATTENTION_REASON_FINISHED),
    (da.AttentionReason.ERROR, pb.ATTENTION_REASON_ERROR),
    (da.AttentionReason.PERMISSION, pb.ATTENTION_REASON_PERMISSION),
)
_REASON = dict(_REASONS)
_REASON_BACK = {stored: reason for reason, stored in _REASONS}
_QUEUED_BY = {by.value: by for by in da.QueuedBy}
_TITLE_SOURCE = {source.value: source for source in da.TitleSource}


# Stored as they are.
_SAME = ("id", "provider", "cwd", "model", "mode", "title", "provider_session_id")


def encode_agent(agent: da.Agent, whole: bool = False) -> bytes:
    """The agent's record. Its long queued prompts are summaries whose content the store keeps
    in its own table; `whole`: with their content too (a cluster's stream carries it all)."""
    record = pb.Agent(
        **{name: getattr(agent, name) for name in _SAME},
        labels=dict(agent.labels),
        created_at=timestamp(agent.created_at_ms),
        updated_at=timestamp(agent.updated_at_ms),
        timeline=pb.TimelineInfo(epoch=agent.epoch, next_seq=agent.next_seq),
        archived_at=None if agent.archived_at_ms is None else timestamp(agent.archived_at_ms),
        last_error=None if agent.last_error is None else _error_record(agent.last_error),
        last_usage=None if agent.last_usage is None else usage_record(agent.last_usage),
        title_source=agent.title_source.value,
        workspace=None if agent.workspace is None else _workspace_record(agent.workspace),
        usage_total=usage_record(agent.usage_total),
    )
    _put_lifecycle(record.lifecycle, agent.lifecycle)
    attention = agent.attention
    record.attention.required = attention.required
    if attention.reason is not None:
        record.attention.reason = _REASON[attention.reason]
    if attention.at_ms:
        record.attention.at.CopyFrom(timestamp(attention.at_ms))
    record.pending_permissions.extend(map(_permission_record, agent.pending_permissions))
    record.queued_prompts.extend(_queued_record(q, whole) for q in agent.queued_prompts)
    return record.SerializeToString()


def decode_agent(data: bytes) -> da.Agent:
    record = parse(pb.Agent, data, "agent")
    if not record.id:
        raise ValueError("an agent without an id")
    stored = record.attention
    same: dict[str, Any] = {name: getattr(record, name) for name in _SAME}
    timeline = record.timeline
    # Start-up decodes every stored agent: what most agents do not have (labels, a pending
    # permission, a queued prompt, attention) costs a length check, not a conversion.
    labels, pending, queued = record.labels, record.pending_permissions, record.queued_prompts
    return da.Agent(
        **same,
        lifecycle=_lifecycle(record.lifecycle),
        created_at_ms=ms(record.created_at),
        updated_at_ms=ms(record.updated_at),
        epoch=timeline.epoch,
        next_seq=timeline.next_seq,
        labels=dict(labels) if labels else {},
        attention=_attention(stored) if stored.ByteSize() else _NO_ATTENTION,
        pending_permissions=tuple(map(_permission, pending)) if pending else (),
        queued_prompts=tuple(map(_queued, queued)) if queued else (),
        archived_at_ms=ms(record.archived_at) if record.HasField("archived_at") else None,
        last_error=_error(record.last_error) if record.HasField("last_error") else None,
        last_usage=usage(record.last_usage) if record.HasField("last_usage") else None,
        # "" (and a record from before sources were stored) is NONE; the title rules treat
        # a title without a source as a person's (manager/titles.py).
        title_source=_TITLE_SOURCE.get(record.title_source, da.TitleSource.NONE),
        workspace=_workspace(record.workspace) if record.HasField("workspace") else None,
        usage_total=usage(record.usage_total),
    )


# --- parts ------------------------------------------------------------------------------------

_NO_ATTENTION = da.Attention()


def _attention(stored: pb.Attention) -> da.Attention:
    return da.Attention(
        stored.required,
        _REASON_BACK.get(stored.reason),
        ms(stored.at) if stored.HasField("at") else 0,
    )


_WORKSPACE = ("repository", "branch", "base", "base_commit", "path")


def _workspace_record(workspace: Workspace) -> pb.Workspace:
    return pb.Workspace(**{name: getattr(workspace, name) for name in _WORKSPACE})


def _workspace(stored: pb.Workspace) -> Workspace:
    return Workspace(*(getattr(stored, name) for name in _WORKSPACE))


def _put_lifecycle(into: pb.AgentLifecycle, lifecycle: da.Lifecycle) -> None:
    match lifecycle:
        case da.Initializing():
            into.initializing.SetInParent()
        case da.Idle():
            into.idle.SetInParent()
        case da.Running(active_turn_id=turn_id):
            into.running.active_turn_id = turn_id
        case da.Errored(error=error):
            into.errored.error.CopyFrom(_error_record(error))
        case da.Closed(closed_at_ms=at):
            into.closed.closed_at.CopyFrom(timestamp(at))
        case _:
            assert_never(lifecycle)


def _lifecycle(stored: pb.AgentLifecycle) -> da.Lifecycle:
    match stored.WhichOneof("state"):
        case "initializing":
            return da.Initializing()
        case "idle":
            return da.Idle()
        case "running":
            return da.Running(stored.running.active_turn_id)
        case "errored":
            if not stored.errored.HasField("error"):
                raise ValueError("an errored lifecycle without its error")
            return da.Errored(_error(stored.errored.error))
        case "closed":
            return da.Closed(ms(stored.closed.closed_at))
        case _:
            raise ValueError("an agent without a lifecycle state")


def _permission_record(p: da.PendingPermission) -> pb.PendingPermission:
    record = pb.PendingPermission(
        id=p.id, name=p.name, kind=p.kind, title=p.title, turn_id=p.turn_id
    )
    record.actions.extend(
        pb.PermissionAction(id=a.id, label=a.label, kind=a.kind) for a in p.actions
    )
    record.input_bytes = p.input_bytes
    record.input_clipped = p.input_preview is not None
    shown = p.input if p.input_preview is None else p.input_preview
    # ParseDict takes any JSON object; its stub wants a plain dict.
    json_format.ParseDict(cast(Any, dict(shown)), record.input)
    return record


def _permission(stored: pb.PendingPermission) -> da.PendingPermission:
    fields: dict[str, JsonValue] = json_format.MessageToDict(stored.input)
    return da.PendingPermission(
        id=stored.id,
        name=stored.name,
        kind=stored.kind,
        title=stored.title,
        input=fields,
        actions=tuple(da.PermissionAction(a.id, a.label, a.kind) for a in stored.actions),
        turn_id=stored.turn_id,
        input_bytes=stored.input_bytes,
        # A long input was stored as its preview.
        input_preview=fields if stored.input_clipped else None,
    )


def _queued_record(q: da.QueuedPrompt, whole: bool = False) -> pb.QueuedPrompt:
    s = q.summary
    record = pb.QueuedPrompt(
        client_message_id=q.client_message_id,
        queued_at=timestamp(q.queued_at_ms),
        text_bytes=s.text_bytes,
        chars=s.chars,
        image_count=s.image_count,
        preview=s.preview,
        clipped=s.clipped,
        queued_by=q.queued_by.value,
    )
    if whole or not s.clipped:  # a short prompt is its preview: no row in queued_prompts
        record.content.extend(map(_part_record, q.content))
    return record


def _queued(stored: pb.QueuedPrompt) -> da.QueuedPrompt:
    """The summary, and the content when the record holds it: a short prompt, any prompt of a
    record from before queued prompts had a table (its summary fields all unset), or a whole
    record (`encode_agent(whole=True)`). Otherwise the content is () until the store joins it
    from its table."""
    old = stored.chars == 0 and not stored.clipped
    summary = PromptSummary(
        stored.text_bytes, stored.chars, stored.image_count, stored.preview, stored.clipped
    )
    content = _prompt(stored.content) if old or not stored.clipped or stored.content else ()
    return da.QueuedPrompt(
        stored.client_message_id,
        content,
        ms(stored.queued_at),
        _QUEUED_BY.get(stored.queued_by, da.QueuedBy.CLIENT),
        **({} if old else {"summary": summary}),
    )


def _part_record(part: TextPart | ImagePart) -> pb.ContentPart:
    if isinstance(part, TextPart):
        return pb.ContentPart(text=part.text)
    return pb.ContentPart(image=pb.Image(mime_type=part.mime_type, data=part.data))


def _prompt(parts: Iterable[pb.ContentPart]) -> Prompt:
    """The stored parts; a part with neither text nor image is left out."""
    return tuple(_part(part) for part in parts if part.WhichOneof("part") is not None)


def _part(stored: pb.ContentPart) -> TextPart | ImagePart:
    if stored.HasField("image"):
        return ImagePart(stored.image.mime_type, stored.image.data)
    return TextPart(stored.text)


def _error_record(error: da.AgentError) -> pb.AgentError:
    return pb.AgentError(message=error.message, code=error.code)


def _error(stored: pb.AgentError) -> da.AgentError:
    return da.AgentError(stored.message, stored.code)
