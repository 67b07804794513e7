"""Codex approval requests as corral permissions, and corral's answers as codex decisions.

`item/commandExecution/requestApproval` lists the decisions it offers (`availableDecisions`:
strings such as "accept", or one-key objects such as `{"acceptWithExecpolicyAmendment": ...}`);
`item/fileChange/requestApproval` lists none, so its actions are the four its schema allows.
Each offered decision is one PermissionAction (id: the string, or the object's key). An answer
naming an offered action sends that decision back as it was offered; otherwise ALLOW is
"accept" and DENY is "decline" (the turn goes on without the action; both are valid decisions
for every approval, offered or not). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral_server.domain.agent import (
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
    PermissionResponse,
)
from corral_server.domain.timeline import JsonValue, ToolCall

COMMAND_APPROVAL = "item/commandExecution/requestApproval"
FILE_CHANGE_APPROVAL = "item/fileChange/requestApproval"

# The FileChangeApprovalDecision values (the schema snapshot in tests/agents/codex_schema/).
_FILE_CHANGE_DECISIONS: tuple[JsonValue, ...] = ("accept", "acceptForSession", "decline", "cancel")
# Decision -> (label, kind); kinds follow ACP's option kinds where one fits.
_ACTIONS = {
    "accept": ("Accept", "allow_once"),
    "acceptForSession": ("Accept for this session", "allow_always"),
    "acceptWithExecpolicyAmendment": ("Accept and allow such commands from now on", "allow_always"),
    "applyNetworkPolicyAmendment": ("Apply the proposed network rule", "allow_always"),
    "decline": ("Decline (the turn goes on)", "reject_once"),
    "cancel": ("Decline and stop the turn", "reject_and_stop"),
}
_BY_BEHAVIOR = {PermissionBehavior.ALLOW: "accept", PermissionBehavior.DENY: "decline"}


def decision_id(decision: JsonValue) -> str:
    if isinstance(decision, str):
        return decision
    if isinstance(decision, dict) and len(decision) == 1:
        return str(next(iter(decision)))
    return ""


def offered(method: str, params: Mapping[str, JsonValue]) -> tuple[JsonValue, ...]:
    """The decisions an approval request offers, as codex wrote them."""
    listed = params.get("availableDecisions")
    if method == COMMAND_APPROVAL and isinstance(listed, list) and listed:
        return tuple(d for d in listed if decision_id(d))
    if method == COMMAND_APPROVAL:
        return ("accept", "acceptForSession", "decline", "cancel")
    return _FILE_CHANGE_DECISIONS


def permission(
    request_id: str,
    turn_id: str,
    method: str,
    params: Mapping[str, JsonValue],
    call: ToolCall | None,
    decisions: Sequence[JsonValue],
) -> PendingPermission:
    actions = tuple(_action(d) for d in decisions)
    reason = params.get("reason")
    reason = reason if isinstance(reason, str) else ""
    if method == COMMAND_APPROVAL:
        command = params.get("command")
        command = command if isinstance(command, str) else ""
        cwd = params.get("cwd")
        shown: dict[str, JsonValue] = {
            "command": command,
            "cwd": cwd if isinstance(cwd, str) else "",
        }
        if reason:
            shown["reason"] = reason
        return PendingPermission(
            request_id, "shell", "execute", command or reason, shown, actions, turn_id
        )
    changes = call.input if call is not None and isinstance(call.input, dict) else {}
    shown = {**changes}
    if reason:
        shown["reason"] = reason
    listed = shown.get("changes")
    paths = (
        [c.get("path") for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    )
    title = reason or f"change {', '.join(str(p) for p in paths) or 'files'}"
    return PendingPermission(request_id, "apply_patch", "edit", title, shown, actions, turn_id)


def _action(decision: JsonValue) -> PermissionAction:
    key = decision_id(decision)
    label, kind = _ACTIONS.get(key, (key, ""))
    return PermissionAction(key, label, kind)


def decision(decisions: Sequence[JsonValue], response: PermissionResponse) -> JsonValue:
    """The decision to send for corral's answer (see the module docstring)."""
    for offer in decisions:
        if response.selected_action_id and decision_id(offer) == response.selected_action_id:
            return offer
    return _BY_BEHAVIOR[response.behavior]
