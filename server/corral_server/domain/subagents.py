"""Sub-agent run records (docs/design.md#subagents): plain values, replaced whole by the
registry, their single writer. A record says who asked (requester), who may control
(controller), which child works on which task, how the run ended, and where its announce is
(the outbox state).

Must not: import anything above the domain (no manager, no grpc, no protobuf).
(subagents/ owns what happens to them: the registry, its queries and the announce outbox.)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NewType

from corral_server.domain.agent import Usage

RunId = NewType("RunId", str)

# The label a child agent carries besides `corral.parent-agent-id`: the run it works for.
RUN_ID_LABEL = "corral.subagent-run-id"
# The result text kept of a child's last reply: enough for a summary, never a whole log.
MAX_RESULT_CHARS = 8_000


class Outcome(enum.Enum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    KILLED = "killed"
    UNKNOWN = "unknown"


class Cleanup(enum.Enum):
    KEEP = "keep"
    DELETE = "delete"


class AnnounceState(enum.Enum):
    """The announce outbox (docs/design.md#durability): NOT_DUE while the run runs; then PENDING
    (delivering, or retrying), DEFERRED (the child's descendants are still pending), and
    exactly one of the three final states."""

    NOT_DUE = "not_due"
    PENDING = "pending"
    DEFERRED = "deferred"
    DELIVERED = "delivered"
    SUPPRESSED = "suppressed"
    GIVEN_UP = "given_up"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({AnnounceState.DELIVERED, AnnounceState.SUPPRESSED, AnnounceState.GIVEN_UP})


@dataclass(frozen=True, slots=True)
class Delivering:
    """An announce under way: the requester's timeline (epoch) and the seq its notice row
    will have at least. Stored before the row is written, so after a crash the row is looked
    for from there on instead of written twice (the idempotency key is the run id)."""

    epoch: str
    from_seq: int


@dataclass(frozen=True, slots=True)
class SubagentRun:
    run_id: RunId
    # Empty until the child agent exists (the run's slot is claimed first: limits).
    child_agent_id: str
    requester_agent_id: str
    controller_agent_id: str
    task: str
    created_at_ms: int
    depth: int
    label: str = ""
    cleanup: Cleanup = Cleanup.KEEP
    run_timeout_s: int = 0
    expects_completion_message: bool = False
    started_at_ms: int | None = None
    # Invariant: ended_at_ms, outcome are set together, once; then announce_state leaves
    # NOT_DUE (and reaches a finished state exactly once).
    ended_at_ms: int | None = None
    outcome: Outcome | None = None
    end_reason: str = ""
    result_text: str = ""
    usage: Usage | None = None
    announce_state: AnnounceState = AnnounceState.NOT_DUE
    # When the announce was first deferred (the 30 min limit counts from here).
    deferred_since_ms: int | None = None
    # Delivery attempts that failed (back-off 1, 2, 4, 8 s).
    attempts: int = 0
    delivering: Delivering | None = None
    # When the announce reached a finished state.
    announced_at_ms: int | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at_ms is not None

    @property
    def pending(self) -> bool:
        """Not ended, or its announce not finished yet: what "pending" means in the run tree."""
        return not self.ended or not self.announce_state.finished
