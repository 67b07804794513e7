"""What the registry reads from child agents, and how it stops one: all through the manager's
public methods.

Must not: change a run record; import grpc or protobuf.
"""

from __future__ import annotations

import contextlib
import logging

from corral_server import errors
from corral_server.domain.agent import Initializing, Running
from corral_server.domain.timeline import AssistantMessage, Direction
from corral_server.manager.manager import AgentManager
from corral_server.manager.turns import CancelOutcome

log = logging.getLogger(__name__)

# Rows read from a child's tail to find its last reply.
_RESULT_ROWS = 50


async def last_reply(manager: AgentManager, agent_id: str, turn_id: str = "") -> str:
    """The agent's last assistant row (of `turn_id` when given), or ""."""
    try:
        await manager.rows_settled(agent_id)
        page = await manager.reads.fetch_timeline(agent_id, Direction.TAIL, None, _RESULT_ROWS)
    except errors.CorralError:
        return ""
    for row in reversed(page.rows):
        if isinstance(row.item, AssistantMessage) and (not turn_id or row.turn_id == turn_id):
            return row.item.text
    return ""


def is_busy(manager: AgentManager, agent_id: str) -> bool:
    """Whether the agent is running a turn or still starting (an unknown agent is not)."""
    try:
        lifecycle = manager.get(agent_id).lifecycle
    except errors.CorralError:
        return False
    return isinstance(lifecycle, Running | Initializing)


async def clear_queue(manager: AgentManager, child_id: str) -> None:
    for queued in manager.get(child_id).queued_prompts:
        with contextlib.suppress(errors.QueuedPromptNotFound):
            await manager.remove_queued(child_id, queued.client_message_id)


async def stop_child(manager: AgentManager, child_id: str) -> None:
    """Clear its queue, then interrupt its turn; a provider that refuses is closed."""
    if not child_id:
        return
    try:
        await clear_queue(manager, child_id)
        outcome, _ = await manager.cancel(child_id)
        if outcome is CancelOutcome.REFUSED:
            await manager.close(child_id)
    except (errors.AgentNotFound, errors.AgentClosed):
        pass
    except Exception:
        log.exception("sub-agent %s: could not be stopped", child_id)
