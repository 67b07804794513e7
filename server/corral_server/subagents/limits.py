"""What a spawn asks for, and the registry's tunables (a field of the daemon's Config).

Must not: import anything above the domain and the manager's request checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server import errors
from corral_server.domain.content import TextPart
from corral_server.domain.subagents import Cleanup
from corral_server.manager.validate import Limits, check_prompt

# A run's timeout is at most a week: long enough for any task, small enough for every clock.
MAX_RUN_TIMEOUT_S = 7 * 24 * 3600
# The longest label (a title for the run: the child agent's title, the notice's name).
MAX_LABEL_CHARS = 200


@dataclass(frozen=True, slots=True)
class SubagentLimits:
    # The deepest a child may be below a root agent (a root's children are at depth 1).
    # OpenClaw's run registry defaults to 1; 3 lets an orchestrator's workers have helpers.
    max_depth: int = 3
    # Runs one agent may have running at once (claimed slots included); OpenClaw's default.
    max_children: int = 5
    # A deferred announce looks again every second, for at most 30 minutes (as OpenClaw's).
    defer_recheck_s: float = 1.0
    defer_limit_s: float = 30 * 60.0
    # Failed deliveries retry after 1, 2, 4 and 8 s, then give up.
    retry_backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    # One steer per controller and child every 2 s.
    steer_interval_s: float = 2.0
    # A child's failure is confirmed only if no success follows within 15 s (a child prompted
    # again may still succeed; OpenClaw's grace).
    error_grace_s: float = 15.0
    # The sweeper looks every 60 s. A child of a run with cleanup DELETE is archived an hour
    # after its announce finished (OpenClaw's archiveAfterMinutes default);
    # a finished record whose child is gone or closed is forgotten after a week (corral's
    # choice: long enough for any client to have read it).
    sweep_interval_s: float = 60.0
    archive_after_s: float = 60 * 60.0
    retention_s: float = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.max_children < 1:
            raise ValueError("max_depth and max_children must be at least 1")


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    requester_agent_id: str
    task: str
    provider: str = ""
    model: str = ""
    label: str = ""
    cleanup: Cleanup = Cleanup.KEEP
    run_timeout_s: int = 0  # 0: no limit
    expects_completion_message: bool = False
    controller_agent_id: str = ""  # "": the requester


def check_spawn(request: SpawnRequest, limits: Limits) -> None:
    """INVALID_ARGUMENT for a request no spawn could satisfy (before any slot is claimed)."""
    if not request.task.strip():
        raise errors.InvalidArgument.field("task", "required: what the sub-agent should do")
    check_prompt((TextPart(request.task),), limits, "task")
    if len(request.label) > MAX_LABEL_CHARS:
        raise errors.InvalidArgument.field("label", f"at most {MAX_LABEL_CHARS} chars")
    if not 0 <= request.run_timeout_s <= MAX_RUN_TIMEOUT_S:
        raise errors.InvalidArgument.field(
            "run_timeout_s", f"from 0 (no limit) to {MAX_RUN_TIMEOUT_S}"
        )
