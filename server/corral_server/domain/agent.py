"""The agent snapshot and its lifecycle union (docs/design.md#lifecycle).

The lifecycle is a discriminated union: each state carries exactly the fields that state may
have, so "idle with an active turn" or "errored without an error" cannot be built.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NewType, TypeAlias

from corral_server.domain.content import Prompt, PromptSummary
from corral_server.domain.timeline import JsonValue
from corral_server.domain.workspace import Workspace

AgentId = NewType("AgentId", str)

# The label that makes an agent a child (API.md: `parent_agent_id` is derived from it).
PARENT_AGENT_ID_LABEL = "corral.parent-agent-id"


@dataclass(frozen=True, slots=True)
class AgentError:
    message: str
    code: str = ""


@dataclass(frozen=True, slots=True)
class Initializing:
    pass


@dataclass(frozen=True, slots=True)
class Idle:
    pass


@dataclass(frozen=True, slots=True)
class Running:
    # Empty for an autonomous turn whose id the provider never gave.
    active_turn_id: str


@dataclass(frozen=True, slots=True)
class Errored:
    error: AgentError


@dataclass(frozen=True, slots=True)
class Closed:
    closed_at_ms: int


Lifecycle: TypeAlias = Initializing | Idle | Running | Errored | Closed


class AttentionReason(enum.Enum):
    FINISHED = "finished"
    ERROR = "error"
    PERMISSION = "permission"


@dataclass(frozen=True, slots=True)
class Attention:
    required: bool = False
    reason: AttentionReason | None = None
    at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class PermissionAction:
    id: str
    label: str
    kind: str = ""


@dataclass(frozen=True, slots=True)
class PendingPermission:
    id: str
    name: str
    kind: str = ""
    title: str = ""
    input: Mapping[str, JsonValue] = field(default_factory=dict)
    actions: tuple[PermissionAction, ...] = ()
    turn_id: str = ""  # the turn that asked: the request ends with it
    # Size of the input the provider gave (timeline/size.py's measure), before any cut.
    input_bytes: int = 0
    # `input` as a listing shows it when it is too long to show whole (None: shown whole).
    input_preview: Mapping[str, JsonValue] | None = None


class PermissionBehavior(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class PermissionResponse:
    """An answer to a pending permission (docs/design.md#permissions)."""

    behavior: PermissionBehavior
    selected_action_id: str = ""
    message: str = ""
    updated_input: Mapping[str, JsonValue] | None = None


class TitleSource(enum.Enum):
    """Who set an agent's title (docs/design.md#titles). A USER title is never replaced."""

    NONE = ""  # no title yet
    PROMPT = "prompt"  # the first line of the first prompt
    PROVIDER = "provider"  # the provider named the conversation
    USER = "user"  # CreateAgent's or UpdateAgent's title


class QueuedBy(enum.Enum):
    """What queued a prompt."""

    CLIENT = "client"  # SendPrompt or StreamTurn
    FOLLOW_UP = "follow-up"  # a permission's answer asked for it
    SUBAGENT = "subagent"  # a child's result waking the agent that spawned it


_NO_SUMMARY = PromptSummary(0, 0, 0, "", False)


@dataclass(frozen=True, slots=True)
class QueuedPrompt:
    """A prompt waiting for the running turn to end. Listings show its `summary`; the
    content is fetched on its own. `content` is () only while a stored record waits for its
    prompt's text (store/agent_records.py joins them at load)."""

    client_message_id: str
    content: Prompt
    queued_at_ms: int
    queued_by: QueuedBy = QueuedBy.CLIENT
    # Computed from `content` when not given (once: listings read it on every change).
    summary: PromptSummary = _NO_SUMMARY

    def __post_init__(self) -> None:
        if self.summary is _NO_SUMMARY:
            object.__setattr__(self, "summary", PromptSummary.of(self.content))


@dataclass(frozen=True, slots=True)
class Agent:
    """One agent as every reader sees it. Replaced whole by its actor, never mutated."""

    id: AgentId
    provider: str
    cwd: str
    lifecycle: Lifecycle
    created_at_ms: int
    updated_at_ms: int
    epoch: str
    next_seq: int
    model: str = ""
    mode: str = ""
    title: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    attention: Attention = Attention()
    pending_permissions: tuple[PendingPermission, ...] = ()
    queued_prompts: tuple[QueuedPrompt, ...] = ()
    provider_session_id: str = ""
    archived_at_ms: int | None = None
    last_error: AgentError | None = None
    last_usage: Usage | None = None
    title_source: TitleSource = TitleSource.NONE
    # The git worktree corral made for the agent, if it asked for one (never changes).
    workspace: Workspace | None = None
    # Every completed turn's usage added up (turn_end.py); a rewind keeps it.
    usage_total: Usage = Usage()

    @property
    def parent_agent_id(self) -> str:
        return self.labels.get(PARENT_AGENT_ID_LABEL, "")

    @property
    def is_closed(self) -> bool:
        return isinstance(self.lifecycle, Closed)
