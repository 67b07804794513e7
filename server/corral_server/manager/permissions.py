"""Pending permissions on an agent's snapshot (seed 000, section 10): pure functions the actor
applies on its queue. A request belongs to the turn that asked and ends with it; attention
PERMISSION is raised on the edge from none pending to one (section 9)."""

from __future__ import annotations

from dataclasses import replace

from corral_server import errors
from corral_server.domain.agent import Agent, PendingPermission, PermissionResponse
from corral_server.manager.sanitize import sanitize_json, sanitize_text

# Requests one agent may hold pending: more is a provider bug, answered by failing the turn
# that asked (actor_permissions.py), with this code.
MAX_PENDING_PERMISSIONS = 64
TOO_MANY_PERMISSIONS = "TOO_MANY_PERMISSIONS"


def admitted(permission: PendingPermission, turn_id: str) -> PendingPermission:
    """The provider's request, mended at the boundary and bound to the turn that asked."""
    t = sanitize_text
    clean = sanitize_json(dict(permission.input))
    return replace(
        permission,
        id=t(permission.id),
        name=t(permission.name),
        kind=t(permission.kind),
        title=t(permission.title),
        input=clean if isinstance(clean, dict) else {"value": clean},
        actions=tuple(
            replace(a, id=t(a.id), label=t(a.label), kind=t(a.kind)) for a in permission.actions
        ),
        turn_id=turn_id,
    )


def with_request(agent: Agent, permission: PendingPermission) -> Agent | None:
    """`agent` holding one more pending request; None when it already holds that id.
    ResourceExhausted when it already holds MAX_PENDING_PERMISSIONS."""
    pending = agent.pending_permissions
    if any(p.id == permission.id for p in pending):
        return None
    if len(pending) >= MAX_PENDING_PERMISSIONS:
        raise errors.ResourceExhausted(
            f"the provider asked for more than {MAX_PENDING_PERMISSIONS} permissions at once"
        )
    return replace(agent, pending_permissions=(*pending, permission))


def without(agent: Agent, request_ids: set[str]) -> Agent:
    kept = tuple(p for p in agent.pending_permissions if p.id not in request_ids)
    return replace(agent, pending_permissions=kept)


def find(agent: Agent, request_id: str) -> PendingPermission:
    for permission in agent.pending_permissions:
        if permission.id == request_id:
            return permission
    raise errors.PermissionNotFound(agent.id, request_id)


def check_answer(permission: PendingPermission, response: PermissionResponse) -> None:
    """The answer must pick one of the actions the provider offered, when it names one."""
    offered = [a.id for a in permission.actions]
    if response.selected_action_id and response.selected_action_id not in offered:
        raise errors.InvalidArgument.field(
            "selected_action_id", f"not offered; one of {', '.join(offered) or '(none)'}"
        )
