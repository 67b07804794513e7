"""CreateSchedule's checks: everything a schedule needs is checked before it is stored, so a
bad request (a malformed cron expression, an unknown time zone or agent, both targets or
none) is INVALID_ARGUMENT or NOT_FOUND naming the field, and creates nothing."""

from __future__ import annotations

from dataclasses import dataclass

from corral_server import errors
from corral_server.domain.schedules import Schedule, ScheduleId, Timing
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import IfRunning
from corral_server.manager.validate import check_cwd, check_labels, check_title
from corral_server.schedules.timing import check_timing, next_after

MAX_PROMPT_BYTES = 65_536


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    prompt: str
    timing: Timing
    if_running: IfRunning = IfRunning.REJECT
    agent_id: str = ""
    create: CreateSpec | None = None


def build(
    request: ScheduleRequest, manager: AgentManager, schedule_id: ScheduleId, now_ms: int
) -> Schedule:
    """The schedule the request asks for, its first firing after now; or the first error."""
    if bool(request.agent_id) == (request.create is not None):
        raise errors.InvalidArgument.field("agent_id", "give exactly one of agent_id and create")
    if not request.prompt.strip():
        raise errors.InvalidArgument.field("prompt", "required")
    if len(request.prompt.encode()) > MAX_PROMPT_BYTES:
        raise errors.InvalidArgument.field("prompt", f"at most {MAX_PROMPT_BYTES} bytes")
    check_timing(request.timing, now_ms)
    if request.agent_id:
        agent = manager.get(request.agent_id)  # NOT_FOUND / AGENT_NOT_FOUND
        if agent.is_closed:
            raise errors.AgentClosed(agent.id)
    elif request.create is not None:
        _check_create(request.create, manager)
    first = next_after(request.timing, now_ms, now_ms)
    return Schedule(
        id=schedule_id,
        prompt=request.prompt,
        timing=request.timing,
        if_running=request.if_running,
        created_at_ms=now_ms,
        next_run_ms=first,
        agent_id=request.agent_id,
        create=request.create,
    )


def _check_create(spec: CreateSpec, manager: AgentManager) -> None:
    """What CreateAgent would refuse at once; the provider's own checks run at each firing
    (one that fails then is a FAILED run)."""
    names = [p.name for p in manager.providers_info()]
    if spec.provider not in names:
        raise errors.InvalidArgument.field(
            "create.provider", f"unknown provider {spec.provider!r}; one of {', '.join(names)}"
        )
    check_cwd(spec.cwd)
    check_title(spec.title, manager.limits)
    check_labels(spec.labels, manager.limits)
    if spec.initial_prompt:
        raise errors.InvalidArgument.field("create.initial_prompt", "must be empty: use prompt")
