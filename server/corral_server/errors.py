"""The domain exception tree. The rpc edge maps each class to a gRPC status (rpc/errors.py).

    CorralError
    ├── InvalidArgument          bad input; carries field violations      -> INVALID_ARGUMENT
    │   └── BadImportFile        an export file that is not one, with its line number
    ├── NotFound
    │   ├── AgentNotFound                                                 -> NOT_FOUND
    │   ├── QueuedPromptNotFound                                          -> NOT_FOUND
    │   ├── PermissionNotFound                                            -> NOT_FOUND
    │   ├── SubagentRunNotFound                                           -> NOT_FOUND
    │   ├── ToolOutputNotFound   no retained row keeps that output         -> NOT_FOUND
    │   ├── ProviderSessionNotFound  ImportAgent of a session the provider lacks -> NOT_FOUND
    │   ├── ForkCutNotFound      ForkAgent at a message or row the timeline lacks -> NOT_FOUND
    │   └── UnknownProvider                                               -> INVALID_ARGUMENT
    ├── FailedPrecondition                                                -> FAILED_PRECONDITION
    │   ├── AgentBusy            a foreground turn is already running
    │   ├── AgentClosed          the agent's runtime is closed
    │   ├── MessageNotConfirmed  Rewind to a message the provider never confirmed
    │   ├── TimelineReset        the timeline was re-based under an ExportAgent
    │   ├── SubagentLimit        a spawn past the depth or children limit
    │   ├── SubagentRunEnded     a steer of a run that has ended
    │   ├── SubagentRunSteering  a steer of a run another steer is replacing
    │   ├── ProviderUnavailable  the provider is configured but cannot run
    │   ├── ImportUnsupported    ImportAgent on a provider that cannot import
    │   ├── ProviderRefusedInterrupt
    │   └── ForkFailed           ForkAgent's provider session could not be made at the cut
    ├── AlreadyExists            request_id reused with different args    -> ALREADY_EXISTS
    ├── ResourceExhausted        a configured limit was hit               -> RESOURCE_EXHAUSTED
    │   ├── SubscriberLagged     a stream fell behind retained history
    │   ├── SubscriberStalled    a stream's client stopped reading
    │   ├── StreamLimit          the daemon's streams or connections are at their limit
    │   └── SteerRateLimited     a run steered again within its interval
    ├── Unimplemented            a capability a later release delivers    -> UNIMPLEMENTED
    ├── ProviderTimeout          a provider call missed its deadline      -> DEADLINE_EXCEEDED
    ├── ShuttingDown             the daemon is draining                   -> UNAVAILABLE
    ├── Standby                  a hot standby waiting for the state dir  -> UNAVAILABLE
    └── AgentOwnedElsewhere      another cluster node owns the agent      -> UNAVAILABLE

Each error has a stable `reason` (the ErrorInfo reason on the wire) and structured fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldViolation:
    field: str
    description: str


class CorralError(Exception):
    reason = "INTERNAL"

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        # Field violations: sent as google.rpc.BadRequest whatever the status code.
        self.violations: tuple[FieldViolation, ...] = ()


class InvalidArgument(CorralError):
    reason = "INVALID_ARGUMENT"

    def __init__(self, message: str, *violations: FieldViolation) -> None:
        super().__init__(message)
        self.violations = violations or (FieldViolation("", message),)

    @classmethod
    def field(cls, name: str, description: str) -> InvalidArgument:
        return cls(f"{name}: {description}", FieldViolation(name, description))


class BadImportFile(InvalidArgument):
    reason = "BAD_IMPORT_FILE"

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}", FieldViolation("data", f"line {line}: {why}"))
        self.line = line
        self.metadata["line"] = str(line)


class NotFound(CorralError):
    reason = "NOT_FOUND"


class AgentNotFound(NotFound):
    reason = "AGENT_NOT_FOUND"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id!r} not found", metadata={"agent_id": agent_id})
        self.agent_id = agent_id


class ToolOutputNotFound(NotFound):
    reason = "TOOL_OUTPUT_NOT_FOUND"

    def __init__(self, agent_id: str, blob_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r} keeps no tool output {blob_id!r} (its row was rewound, dropped"
            " by retention, or, without a state directory, evicted from memory)",
            metadata={"agent_id": agent_id, "blob_id": blob_id},
        )


class QueuedPromptNotFound(NotFound):
    reason = "QUEUED_PROMPT_NOT_FOUND"

    def __init__(self, agent_id: str, client_message_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r} has no queued prompt {client_message_id!r} (it started, "
            "was removed, or was never queued)",
            metadata={"agent_id": agent_id, "client_message_id": client_message_id},
        )


class PermissionNotFound(NotFound):
    reason = "PERMISSION_NOT_FOUND"

    def __init__(self, agent_id: str, request_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r} has no pending permission {request_id!r} (answered, ended "
            "with its turn, or never asked)",
            metadata={"agent_id": agent_id, "request_id": request_id},
        )


class SubagentRunNotFound(NotFound):
    reason = "SUBAGENT_RUN_NOT_FOUND"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"sub-agent run {run_id!r} not found", metadata={"run_id": run_id})


class ProviderSessionNotFound(NotFound):
    reason = "PROVIDER_SESSION_NOT_FOUND"

    def __init__(self, session_id: str, why: str) -> None:
        super().__init__(
            f"the provider has no session {session_id!r}: {why}",
            metadata={"provider_session_id": session_id},
        )


class UnknownProvider(NotFound):
    reason = "UNKNOWN_PROVIDER"

    def __init__(self, provider: str, known: tuple[str, ...]) -> None:
        super().__init__(
            f"unknown provider {provider!r}; known: {', '.join(known)}",
            metadata={"provider": provider, "known": ",".join(known)},
        )
        self.violations = (FieldViolation("provider", f"one of {', '.join(known)}"),)


class FailedPrecondition(CorralError):
    reason = "FAILED_PRECONDITION"


class TimelineReset(FailedPrecondition):
    reason = "TIMELINE_RESET"

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r}: the timeline was re-based (or trimmed) during the export; "
            "export again",
            metadata={"agent_id": agent_id},
        )


class AgentBusy(FailedPrecondition):
    reason = "AGENT_BUSY"

    def __init__(self, agent_id: str, turn_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r} is running turn {turn_id!r}; "
            "send with if_running=QUEUE, STEER or REPLACE, or cancel it first",
            metadata={"agent_id": agent_id, "turn_id": turn_id},
        )


class AgentClosed(FailedPrecondition):
    reason = "AGENT_CLOSED"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id!r} is closed", metadata={"agent_id": agent_id})


class MessageNotConfirmed(FailedPrecondition):
    reason = "MESSAGE_NOT_CONFIRMED"

    def __init__(self, agent_id: str, message_id: str, doing: str = "rewind") -> None:
        super().__init__(
            f"agent {agent_id!r}: the provider never confirmed a user message {message_id!r} "
            f"in the retained timeline; {doing} only to a message its echo confirmed",
            metadata={"agent_id": agent_id, "message_id": message_id},
        )


class ForkCutNotFound(NotFound):
    reason = "FORK_CUT_NOT_FOUND"

    def __init__(self, agent_id: str, what: str) -> None:
        super().__init__(
            f"agent {agent_id!r}: its retained timeline has no {what} to fork at",
            metadata={"agent_id": agent_id},
        )


class ForkFailed(FailedPrecondition):
    """The fork's provider session could not be made at the cut (the provider's fork, or the
    priming turn, failed); nothing of the fork is kept."""

    reason = "FORK_FAILED"


class SubagentLimit(FailedPrecondition):
    """A spawn refused by a limit; `reason` says which (limits are claimed with
    the spawn, so concurrent spawns never pass one together: docs/design.md#subagents)."""

    def __init__(self, reason: str, message: str, *, limit: int, current: int) -> None:
        super().__init__(message, metadata={"limit": str(limit), "current": str(current)})
        self.reason = reason


class SubagentRunEnded(FailedPrecondition):
    """A steer of a run that has ended (spawn a new run instead)."""

    reason = "SUBAGENT_RUN_ENDED"


class SubagentRunSteering(FailedPrecondition):
    """A steer of a run another steer is replacing right now."""

    reason = "SUBAGENT_RUN_STEERING"


class ProviderUnavailable(FailedPrecondition):
    """A provider that is configured but cannot run (its program is not installed, it failed
    its handshake): the reason is in the message and metadata."""

    reason = "PROVIDER_UNAVAILABLE"

    def __init__(self, provider: str, why: str) -> None:
        why = why or "unavailable"
        super().__init__(
            f"provider {provider!r} is unavailable: {why}",
            metadata={"provider": provider, "unavailable_reason": why},
        )


class ImportUnsupported(FailedPrecondition):
    """ImportAgent on a provider that keeps no history corral can read."""

    reason = "IMPORT_UNSUPPORTED"

    def __init__(self, provider: str, kind: str) -> None:
        super().__init__(
            f"provider {provider!r} (kind {kind}) cannot import a session's history",
            metadata={"provider": provider, "kind": kind},
        )


class ProviderRefusedInterrupt(FailedPrecondition):
    reason = "PROVIDER_REFUSED_INTERRUPT"


class SearchIndexOff(FailedPrecondition):
    """SearchTimeline on a daemon that keeps no full-text index (started with
    --no-search-index)."""

    reason = "SEARCH_INDEX_OFF"

    def __init__(self) -> None:
        super().__init__(
            "search needs the full-text index: this daemon was started with "
            "--no-search-index; start it without that flag (rows written while it was off "
            "are indexed in the background then)"
        )


class AlreadyExists(CorralError):
    reason = "ALREADY_EXISTS"


class ResourceExhausted(CorralError):
    reason = "RESOURCE_EXHAUSTED"


class SubscriberLagged(ResourceExhausted):
    reason = "SUBSCRIBER_LAGGED"


class SubscriberStalled(ResourceExhausted):
    reason = "SUBSCRIBER_STALLED"


class StreamLimit(ResourceExhausted):
    reason = "STREAM_LIMIT"


class SteerRateLimited(ResourceExhausted):
    reason = "STEER_RATE_LIMITED"


class Unimplemented(CorralError):
    reason = "UNIMPLEMENTED"


class ProviderTimeout(CorralError):
    reason = "PROVIDER_TIMEOUT"

    def __init__(self, call: str, seconds: float) -> None:
        super().__init__(
            f"the provider did not answer {call} within {seconds:g} s",
            metadata={"call": call, "timeout_s": f"{seconds:g}"},
        )
        self.call = call


class ShuttingDown(CorralError):
    reason = "SHUTTING_DOWN"

    def __init__(self) -> None:
        super().__init__("the daemon is shutting down; retry in a moment")


class ClusterUnavailable(CorralError):
    """Cluster: the stream did not answer in time, or this node's read model stopped following
    it (docs/cluster.md#read-model): what the call wrote is not known to be kept; retry."""

    reason = "CLUSTER_UNAVAILABLE"

    def __init__(self, agent_id: str, why: str) -> None:
        super().__init__(
            f"agent {agent_id!r}: the cluster's stream is unavailable ({why}); retry",
            metadata={"agent_id": agent_id},
        )


class AgentOwnedElsewhere(CorralError):
    """A change to an agent this cluster node does not own (docs/cluster.md#forwarding):
    `node` names its owner ("" when none is known), where the call should go."""

    reason = "AGENT_OWNED_ELSEWHERE"

    def __init__(self, agent_id: str, node: str, why: str = "") -> None:
        where = f"node {node!r}" if node else "another node"
        super().__init__(
            f"agent {agent_id!r} is owned by {where}{f': {why}' if why else ''}; "
            "send changes to its owner",
            metadata={"agent_id": agent_id, "node": node},
        )
        self.node = node


class Standby(CorralError):
    reason = "STANDBY"

    def __init__(self) -> None:
        super().__init__(
            "this daemon is a hot standby: another daemon holds its state directory; it "
            "serves once that one stops (a load balancer sends calls to the serving one)"
        )
