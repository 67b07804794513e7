"""Server-wide events: what subscribers see, in revision order (API.md, EventService)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from corral_server.domain.agent import (
    Agent,
    AgentError,
    AttentionReason,
    PendingPermission,
    PermissionBehavior,
    Usage,
)
from corral_server.domain.notification import NOBODY, NotificationPlan
from corral_server.domain.subagents import SubagentRun
from corral_server.domain.timeline import TimelineRow


@dataclass(frozen=True, slots=True)
class AgentUpserted:
    agent: Agent

    @property
    def agent_id(self) -> str:
        return self.agent.id


@dataclass(frozen=True, slots=True)
class AgentRemoved:
    agent_id: str


class RowAppended(NamedTuple):
    """A NamedTuple: one per stored row, on the timeline writer's hot path (see TimelineRow)."""

    agent_id: str
    epoch: str
    row: TimelineRow


@dataclass(frozen=True, slots=True)
class RowUpdated:
    """Row `seq` of `epoch` learned its provider message id (echo reconciliation)."""

    agent_id: str
    epoch: str
    seq: int
    provider_message_id: str


@dataclass(frozen=True, slots=True)
class TimelineReset:
    agent_id: str
    epoch: str
    reason: str


@dataclass(frozen=True, slots=True)
class TurnStarted:
    agent_id: str
    turn_id: str


@dataclass(frozen=True, slots=True)
class TurnCompleted:
    agent_id: str
    turn_id: str
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class TurnFailed:
    agent_id: str
    turn_id: str
    error: AgentError


@dataclass(frozen=True, slots=True)
class TurnCanceled:
    agent_id: str
    turn_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PermissionRequested:
    agent_id: str
    turn_id: str
    permission: PendingPermission


@dataclass(frozen=True, slots=True)
class PermissionResolved:
    """A pending permission ended: answered (`behavior`), or unanswered when its turn ended
    (`behavior` None)."""

    agent_id: str
    turn_id: str
    request_id: str
    behavior: PermissionBehavior | None


@dataclass(frozen=True, slots=True)
class AttentionRequired:
    agent_id: str
    reason: AttentionReason
    # Whom to notify, by the presence policy (docs/design.md#attention).
    notification: NotificationPlan = NOBODY


@dataclass(frozen=True, slots=True)
class SubagentRunUpdated:
    """A sub-agent run changed (published by the registry once the change is stored);
    scoped to the run's requester."""

    run: SubagentRun

    @property
    def agent_id(self) -> str:
        return self.run.requester_agent_id


Event: TypeAlias = (
    AgentUpserted
    | AgentRemoved
    | RowAppended
    | RowUpdated
    | TimelineReset
    | TurnStarted
    | TurnCompleted
    | TurnFailed
    | TurnCanceled
    | PermissionRequested
    | PermissionResolved
    | AttentionRequired
    | SubagentRunUpdated
)

TurnTerminal: TypeAlias = TurnCompleted | TurnFailed | TurnCanceled


# --- stream control: messages about a subscription itself, not about agents --------------


@dataclass(frozen=True, slots=True)
class Synced:
    """The snapshot is complete; live events with revisions > `revision` follow.
    `incarnation` names the event log the revisions belong to."""

    revision: int
    reset: bool = False
    incarnation: str = ""


@dataclass(frozen=True, slots=True)
class SubscriptionReset:
    """The requested resume point is no longer retained; a fresh snapshot follows."""

    requested_revision: int
    earliest_revision: int
    reason: str


@dataclass(frozen=True, slots=True)
class StreamEnding:
    """The server ends the stream; a client resumes with `resume_revision` (and
    `incarnation`, the event log it belongs to)."""

    resume_revision: int
    reason: str
    incarnation: str = ""


StreamControl: TypeAlias = Synced | SubscriptionReset | StreamEnding
