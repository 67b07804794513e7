"""Pending permissions on an agent's snapshot (docs/design.md#permissions): pure functions the actor
applies on its queue. A request belongs to the turn that asked and ends with it; attention
PERMISSION is raised on the edge from none pending to one (docs/design.md#attention)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from corral_server import errors
from corral_server.domain.agent import Agent, PendingPermission, PermissionResponse
from corral_server.domain.timeline import JsonValue
from corral_server.manager.oversize import cut_json, cut_text
from corral_server.manager.sanitize import sanitize_json, sanitize_text
from corral_server.timeline.size import json_bytes, text_bytes

# Requests one agent may hold pending: more is a provider bug, answered by failing the turn
# that asked (actor_permissions.py), with this code.
MAX_PENDING_PERMISSIONS = 64
TOO_MANY_PERMISSIONS = "TOO_MANY_PERMISSIONS"
# Bounds on what a provider's request may make corral hold and send. A request in full (the
# permission_requested event, GetPendingPermission) keeps at most MAX_INPUT_BYTES of input;
# Agent.pending_permissions shows at most PREVIEW_INPUT_BYTES of each, so that 64 of them
# with every text field at its bound stay far below a client's 4 MiB message limit.
MAX_INPUT_BYTES = 1 << 20
PREVIEW_INPUT_BYTES = 4 << 10
MAX_NAME_BYTES = 1_024  # name and kind
MAX_TITLE_BYTES = 4_096
MAX_ACTIONS = 16  # real providers offer 2 to 4
MAX_ACTION_BYTES = 256  # each action's label and kind


def admitted(permission: PendingPermission, turn_id: str) -> PendingPermission:
    """The provider's request, mended at the boundary, bound to the turn that asked, and cut
    to the bounds above (ids are never cut: the answer names them)."""

    def t(text: str, max_bytes: int = MAX_NAME_BYTES) -> str:
        return cut_text(sanitize_text(text), max_bytes)

    clean = sanitize_json(dict(permission.input))
    given: dict[str, JsonValue] = clean if isinstance(clean, dict) else {"value": clean}
    size = json_bytes(given)
    return replace(
        permission,
        id=sanitize_text(permission.id),
        name=t(permission.name),
        kind=t(permission.kind),
        title=t(permission.title, MAX_TITLE_BYTES),
        input=cut_object(given, MAX_INPUT_BYTES) if size > MAX_INPUT_BYTES else given,
        actions=tuple(
            replace(
                a,
                id=sanitize_text(a.id),
                label=t(a.label, MAX_ACTION_BYTES),
                kind=t(a.kind, MAX_ACTION_BYTES),
            )
            for a in permission.actions[:MAX_ACTIONS]
        ),
        turn_id=turn_id,
        input_bytes=size,
        input_preview=(
            cut_object(given, PREVIEW_INPUT_BYTES) if size > PREVIEW_INPUT_BYTES else None
        ),
    )


def cut_object(value: Mapping[str, JsonValue], max_bytes: int) -> dict[str, JsonValue]:
    """`value`'s first entries within about `max_bytes` (timeline/size.py's measure): an
    entry too big for what is left is cut (a string keeps its beginning, anything else
    becomes the beginning of its JSON text, each with oversize.py's marker); once the budget
    is spent, the rest is left out and one entry "…" says how many."""
    kept: dict[str, JsonValue] = {}
    left = max_bytes
    items = list(value.items())
    for i, (key, item) in enumerate(items):
        cost = 18 + text_bytes(key) + json_bytes(item)
        if cost <= left:
            kept[key] = item
            left -= cost
            continue
        room = left - 18 - text_bytes(key) - 6
        if room < 128:
            kept["…"] = f"[cut by corral: {len(items) - i} more entries]"
            break
        kept[key] = cut_text(item, room) if isinstance(item, str) else cut_json(item, room)
        left = 0
    return kept


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
