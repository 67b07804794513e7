"""A codex turn as corral sees it: the running turn's state, a prompt as codex input, and how
codex's `turn/completed` (or a failure) becomes the turn's one terminal event. Pure: no I/O.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import assert_never

from corral_server.domain.agent import AgentError
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.domain.timeline import JsonValue
from corral_server.providers.base import (
    ProviderEvent,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
)
from corral_server.providers.codex_items import UsageTally
from corral_server.providers.codex_protocol import Turn, TurnError, UserInput
from corral_server.providers.command import Run as CommandRun

AGENT_ERROR = "AGENT_ERROR"  # codex failed the turn, or refused a request
AGENT_TIMEOUT = "AGENT_TIMEOUT"  # codex did not answer turn/start within its deadline
INTERRUPTED = "interrupted"


@dataclass(slots=True)
class Run(CommandRun):
    """The running turn: set once codex named it, until its terminal event is reported."""

    usage: UsageTally = field(default_factory=UsageTally)
    # The last error notification codex will not retry (a failed turn may carry none).
    error: AgentError | None = None
    # Codex's JSON-RPC id of each approval request -> corral's request id.
    by_rpc_id: dict[int | str | None, str] = field(default_factory=dict)


def user_input(prompt: Prompt) -> list[UserInput]:
    """A prompt as codex UserInput items (images as data URLs)."""
    items: list[UserInput] = []
    for part in prompt:
        match part:
            case TextPart(text=text):
                items.append({"type": "text", "text": text, "text_elements": []})
            case ImagePart(mime_type=mime, data=data):
                url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
                items.append({"type": "image", "url": url})
            case _:
                assert_never(part)
    return items


def terminal(run: Run, turn: Turn | None) -> ProviderEvent:
    status = turn.get("status") if turn is not None else None
    if run.canceling or status == "interrupted":
        # Interrupt answered CONFIRMED: the turn ends canceled whatever codex said.
        return ProviderTurnCanceled(run.turn_id, INTERRUPTED)
    if status == "completed":
        return ProviderTurnCompleted(run.turn_id, run.usage.usage())
    if status == "failed":
        error = turn.get("error") if turn is not None else None
        failure = agent_error(error) if isinstance(error, dict) else run.error
        return ProviderTurnFailed(
            run.turn_id, failure or AgentError("codex failed the turn", AGENT_ERROR)
        )
    message = f"codex ended the turn with an unknown status {status!r}"
    return ProviderTurnFailed(run.turn_id, AgentError(message, AGENT_ERROR))


def agent_error(error: TurnError | JsonValue) -> AgentError:
    """A codex TurnError: its message, with codex's error kind when it names one."""
    if not isinstance(error, dict):
        return AgentError("codex reported an error", AGENT_ERROR)
    message = str(error.get("message") or "codex reported an error")
    info = error.get("codexErrorInfo")
    kind = info if isinstance(info, str) else next(iter(info), "") if isinstance(info, dict) else ""
    details = error.get("additionalDetails")
    if isinstance(details, str) and details:
        message = f"{message}: {details}"
    return AgentError(f"{message} ({kind})" if kind else message, AGENT_ERROR)


# Codex's sandbox policy objects by the sandbox mode names `thread/start` takes.
_SANDBOX_POLICIES: dict[str, dict[str, JsonValue]] = {
    "workspace-write": {"type": "workspaceWrite"},
    "read-only": {"type": "readOnly"},
    "danger-full-access": {"type": "dangerFullAccess"},
}


def turn_overrides(model: str | None, policy: tuple[str, str] | None) -> dict[str, JsonValue]:
    """What `turn/start` carries to change the thread's model, or its approval policy and
    sandbox (a corral mode), for this turn and the ones after it."""
    overrides: dict[str, JsonValue] = {}
    if model:
        overrides["model"] = model
    if policy is not None:
        approval, sandbox = policy
        overrides["approvalPolicy"] = approval
        overrides["sandboxPolicy"] = _SANDBOX_POLICIES[sandbox]
    return overrides
