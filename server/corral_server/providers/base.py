"""The provider contract: how the manager drives an agent runtime and hears from it.

A provider never touches manager state. It reports what happens through the `EventSink` it
was given (a plain callback that must not block: the manager only enqueues the event onto the
agent's serial queue). Events may arrive before `start_turn` returns; the manager stages them
(docs/design.md#turns).

Importing (ImportAgent) is an optional capability: a provider that can read a stored
session's conversation also implements `HistoryImporter`; `importer_of` is the one place that
asks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeAlias, runtime_checkable

from corral_server.domain.agent import (
    AgentError,
    PendingPermission,
    PermissionBehavior,
    PermissionResponse,
    Usage,
)
from corral_server.domain.content import Prompt
from corral_server.domain.timeline import TimelineItem


@dataclass(frozen=True, slots=True)
class ProviderMode:
    id: str
    label: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class ProviderModel:
    id: str
    label: str


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    name: str
    kind: str
    available: bool
    unavailable_reason: str = ""
    modes: tuple[ProviderMode, ...] = ()
    models: tuple[ProviderModel, ...] = ()
    # The provider takes prompts into a running turn (`ProviderSession.steer`).
    can_steer: bool = False


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server (streamable HTTP) a session's agent is given: corral's sub-agent tools
    (mcp/), when the daemon serves them."""

    name: str
    url: str
    # Sent as `Authorization: Bearer <token>`: it names the agent (its own, never shared).
    bearer_token: str = ""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    agent_id: str
    cwd: str
    model: str = ""
    mode: str = ""
    # A provider session to resume (the agent's stored provider_session_id); "" = a new one.
    resume_session_id: str = ""
    # The daemon's process tag (providers/reaping.py): every process the session starts
    # carries it in its environment, so a daemon restarted on the same state directory can
    # find and kill what a SIGKILLed predecessor left. "" = a tag of the session's own only.
    daemon_tag: str = ""
    # MCP servers to give the agent, where its provider takes them (ACP session/new
    # mcpServers, Claude Code --mcp-config, Codex mcp_servers); () = none.
    mcp_servers: tuple[McpServer, ...] = ()


# --- events a session reports -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderTurnStarted:
    turn_id: str


class ProviderItem(NamedTuple):
    """A timeline item, possibly a fragment: consecutive AssistantMessage / Reasoning items
    with the same message id are text chunks the coalescer joins; ToolCall items with the
    same call_id are status updates where the latest wins (docs/design.md#coalescing). A
    NamedTuple: one per streamed fragment, on the hot path (see TimelineRow)."""

    turn_id: str
    item: TimelineItem
    provider_message_id: str = ""
    # Replayed from the provider's history: stored silently, outside any turn
    # (docs/design.md#resume).
    from_history: bool = False


@dataclass(frozen=True, slots=True)
class ProviderTurnCompleted:
    turn_id: str
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class ProviderTurnFailed:
    turn_id: str
    error: AgentError


@dataclass(frozen=True, slots=True)
class ProviderTurnCanceled:
    turn_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ProviderPermissionRequested:
    """The turn waits for an answer (`ProviderSession.respond_permission`)."""

    turn_id: str
    permission: PendingPermission


@dataclass(frozen=True, slots=True)
class ProviderPermissionResolved:
    """The provider settled a request itself (or echoes an answer corral already gave, which
    corral drops); `behavior` None: it ended unanswered."""

    turn_id: str
    request_id: str
    behavior: PermissionBehavior | None = None


@dataclass(frozen=True, slots=True)
class ProviderSessionDied:
    """The agent's process ended (or broke its protocol) outside `close()`: the session takes
    nothing more. A running turn also ends (the provider reports its terminal event first,
    where it can); the manager opens a new session, resuming the same provider session where
    it can, for the next turn."""

    reason: str


@dataclass(frozen=True, slots=True)
class ProviderTitle:
    """The provider named the conversation (Codex's thread name, a scripted `title:` step).
    The manager keeps it unless a person set the agent's title (docs/design.md#titles)."""

    title: str


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """The model or mode the session now runs with, as the provider says (after a live
    change, or one the agent made itself); None: unchanged (docs/design.md#live-config)."""

    model: str | None = None
    mode: str | None = None


ProviderEvent: TypeAlias = (
    ProviderTurnStarted
    | ProviderItem
    | ProviderTurnCompleted
    | ProviderTurnFailed
    | ProviderTurnCanceled
    | ProviderPermissionRequested
    | ProviderPermissionResolved
    | ProviderSessionDied
    | ProviderTitle
    | ProviderSettings
)

EventSink: TypeAlias = Callable[[ProviderEvent], None]


class InterruptResult(enum.Enum):
    """A provider's answer to "stop turn T" (docs/design.md#cancel)."""

    CONFIRMED = "confirmed"  # T is stopping; its ProviderTurnCanceled follows (or came already)
    REFUSED = "refused"  # T goes on
    NOT_RUNNING = "not_running"  # T is not the running turn (it ended, or never ran): a no-op


class ProviderSession(Protocol):
    @property
    def session_id(self) -> str: ...

    async def start_turn(self, prompt: Prompt) -> str:
        """Start a turn and return its id. The turn's events follow through the sink, ending
        with exactly one terminal event (completed, failed or canceled)."""
        ...

    async def interrupt(self, turn_id: str) -> InterruptResult:
        """Ask turn `turn_id` to stop. Fenced by the id: when another turn (or none) is
        running, nothing is interrupted and the answer is NOT_RUNNING, so an interrupt that
        arrives late can never stop the next turn. An empty `turn_id` names the running turn
        whatever its id (an autonomous turn whose id the provider never gave)."""
        ...

    async def respond_permission(
        self, turn_id: str, request_id: str, response: PermissionResponse
    ) -> Prompt | None:
        """Answer pending request `request_id` of turn `turn_id` (raise when the provider no
        longer waits for it). A prompt returned is a follow-up the provider needs to go on:
        corral starts it as a turn replacing the running one (docs/design.md#turns)."""
        ...

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        """Deliver `prompt` into running turn `turn_id` (docs/design.md#turns). True when the
        provider took it; False when it cannot (then corral queues the prompt instead).
        Providers without `ProviderInfo.can_steer` answer False."""
        ...

    async def close(self) -> None:
        """Stop everything; no event is reported after this returns."""
        ...


class Provider(Protocol):
    @property
    def name(self) -> str: ...

    def info(self) -> ProviderInfo: ...

    def validate_prompt(self, prompt: Prompt) -> None:
        """Raise `InvalidArgument` for a prompt this provider can never run (checked before
        anything is stored)."""
        ...

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ProviderSession: ...


@runtime_checkable
class HistoryImporter(Protocol):
    async def import_history(
        self, provider_session_id: str, cwd: str, daemon_tag: str
    ) -> list[ProviderItem]:
        """The conversation of stored session `provider_session_id`, oldest first, as items
        flagged `from_history` (the session itself is not kept open: the agent's next turn
        resumes it). Raise `NotFound` or `FailedPrecondition`, with the provider's own
        reason, when the session cannot be read. A program it starts carries `daemon_tag`
        (see `SessionConfig.daemon_tag`) and is gone when this returns."""
        ...


def importer_of(provider: Provider) -> HistoryImporter | None:
    """The provider's import capability, or None when it has none."""
    return provider if isinstance(provider, HistoryImporter) else None


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """Where ForkAgent cuts a provider session: before the user message the provider
    confirmed as `message_id`, which started the provider's turn `turn_id`."""

    session_id: str
    message_id: str
    turn_id: str


@runtime_checkable
class SessionForker(Protocol):
    async def fork_session(self, point: ForkPoint, cwd: str, daemon_tag: str) -> str:
        """The provider's own fork: a new stored session holding the conversation of
        `point.session_id` before `point` (the source is left as it is); returns its id, which
        the fork's first turn resumes. Raise `FailedPrecondition` (or `NotFound`) with the
        provider's reason when it cannot. A program it starts carries `daemon_tag` and is gone
        when this returns."""
        ...


def forker_of(provider: Provider) -> SessionForker | None:
    """The provider's fork capability, or None: ForkAgent then primes a new session."""
    return provider if isinstance(provider, SessionForker) else None
