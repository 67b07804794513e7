"""Agent snapshots as bytes, for the durable store: the corral.v1.Agent message, encoded with
`convert.agent_to_pb` and decoded back here. The store keeps bytes and never imports protobuf;
the rpc edge injects this codec, as it injects the hub's encoder.

Decoding is strict about what a snapshot must hold (a lifecycle state, an errored state's
error) and raises `ValueError` naming what is missing: a record that does not decode is
reported, never half-loaded.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from corral.v1 import agent_pb2 as agent_pb
from corral_server.domain import agent as da
from corral_server.domain.content import PromptSummary
from corral_server.rpc.convert import (
    agent_to_pb,
    json_from_value,
    prompt_from_pb,
    timestamp_ms,
)

_REASON_BACK = {
    agent_pb.ATTENTION_REASON_FINISHED: da.AttentionReason.FINISHED,
    agent_pb.ATTENTION_REASON_ERROR: da.AttentionReason.ERROR,
    agent_pb.ATTENTION_REASON_PERMISSION: da.AttentionReason.PERMISSION,
}


def encode_agent(agent: da.Agent) -> bytes:
    return agent_to_pb(agent).SerializeToString()


def decode_agent(data: bytes) -> da.Agent:
    try:
        msg = agent_pb.Agent.FromString(data)
    except DecodeError as exc:
        raise ValueError(f"not an encoded agent: {exc}") from exc
    return agent_from_pb(msg)


def lifecycle_from_pb(msg: agent_pb.AgentLifecycle) -> da.Lifecycle:
    match msg.WhichOneof("state"):
        case "initializing":
            return da.Initializing()
        case "idle":
            return da.Idle()
        case "running":
            return da.Running(msg.running.active_turn_id)
        case "errored":
            if not msg.errored.HasField("error"):
                raise ValueError("an errored lifecycle without its error")
            return da.Errored(_error(msg.errored.error))
        case "closed":
            return da.Closed(timestamp_ms(msg.closed.closed_at))
        case _:
            raise ValueError("an agent without a lifecycle state")


def _error(msg: agent_pb.AgentError) -> da.AgentError:
    return da.AgentError(msg.message, msg.code)


def _usage(msg: agent_pb.Usage) -> da.Usage:
    return da.Usage(msg.input_tokens, msg.output_tokens, msg.cached_input_tokens, msg.cost_usd)


def _permission(msg: agent_pb.PendingPermission) -> da.PendingPermission:
    fields = {key: json_from_value(value) for key, value in msg.input.fields.items()}
    return da.PendingPermission(
        id=msg.id,
        name=msg.name,
        kind=msg.kind,
        title=msg.title,
        input=fields,
        actions=tuple(da.PermissionAction(a.id, a.label, a.kind) for a in msg.actions),
        turn_id=msg.turn_id,
        input_bytes=msg.input_bytes,
        # A stored request was stored as listed: its input is the preview when clipped.
        input_preview=fields if msg.input_clipped else None,
    )


_QUEUED_BY = {by.value: by for by in da.QueuedBy}


def _queued(msg: agent_pb.QueuedPrompt) -> da.QueuedPrompt:
    """A stored queued prompt: its summary, and its content only when the record holds it
    whole (a short prompt, or a record written before prompts had a table of their own: its
    summary fields are all unset). Otherwise the content is () and the store joins it."""
    old = msg.chars == 0 and not msg.clipped
    summary = PromptSummary(msg.text_bytes, msg.chars, msg.image_count, msg.preview, msg.clipped)
    content = prompt_from_pb(list(msg.content)) if old or not msg.clipped else ()
    return da.QueuedPrompt(
        msg.client_message_id,
        content,
        timestamp_ms(msg.queued_at),
        _QUEUED_BY.get(msg.queued_by, da.QueuedBy.CLIENT),
        **({} if old else {"summary": summary}),
    )


def agent_from_pb(msg: agent_pb.Agent) -> da.Agent:
    if not msg.id:
        raise ValueError("an agent without an id")
    attention = msg.attention
    return da.Agent(
        id=da.AgentId(msg.id),
        provider=msg.provider,
        cwd=msg.cwd,
        lifecycle=lifecycle_from_pb(msg.lifecycle),
        created_at_ms=timestamp_ms(msg.created_at),
        updated_at_ms=timestamp_ms(msg.updated_at),
        epoch=msg.timeline.epoch,
        next_seq=msg.timeline.next_seq,
        model=msg.model,
        mode=msg.mode,
        title=msg.title,
        labels=dict(msg.labels),
        attention=da.Attention(
            attention.required,
            _REASON_BACK.get(attention.reason),
            timestamp_ms(attention.at) if attention.HasField("at") else 0,
        ),
        pending_permissions=tuple(_permission(p) for p in msg.pending_permissions),
        queued_prompts=tuple(_queued(q) for q in msg.queued_prompts),
        provider_session_id=msg.provider_session_id,
        archived_at_ms=timestamp_ms(msg.archived_at) if msg.HasField("archived_at") else None,
        last_error=_error(msg.last_error) if msg.HasField("last_error") else None,
        last_usage=_usage(msg.last_usage) if msg.HasField("last_usage") else None,
        usage_total=_usage(msg.usage_total),
    )
