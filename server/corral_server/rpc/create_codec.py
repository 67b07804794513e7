"""A CreateAgentRequest between corral.v1 and the manager's `CreateSpec`: CreateAgent's own,
and the `create` a schedule keeps for each of its runs (schedule_codec.py)."""

from __future__ import annotations

from corral.v1 import agent_service_pb2 as svc_pb
from corral_server.domain.content import Prompt
from corral_server.manager.specs import CreateSpec
from corral_server.rpc.workspace_codec import worktree_request_from_pb


def spec_from_pb(
    msg: svc_pb.CreateAgentRequest, initial_prompt: Prompt = (), request_id: str = ""
) -> CreateSpec:
    """The spec of `msg`; its initial prompt and request id only as the caller gives them
    (CreateAgent converts and checks the prompt; a schedule's runs take neither)."""
    return CreateSpec(
        provider=msg.provider,
        cwd=msg.cwd,
        model=msg.model,
        mode=msg.mode,
        title=msg.title,
        labels=dict(msg.labels),
        initial_prompt=initial_prompt,
        request_id=request_id,
        worktree=worktree_request_from_pb(msg),
    )


def spec_to_pb(spec: CreateSpec) -> svc_pb.CreateAgentRequest:
    """A schedule's create as it lists it (no initial prompt, no request id)."""
    msg = svc_pb.CreateAgentRequest(
        provider=spec.provider,
        cwd=spec.cwd,
        model=spec.model,
        mode=spec.mode,
        title=spec.title,
        labels=dict(spec.labels),
    )
    if spec.worktree is not None:
        msg.worktree.branch = spec.worktree.branch
        msg.worktree.base = spec.worktree.base
    return msg
