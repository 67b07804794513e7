"""The sub-agent operations an agent may call on itself (docs/mcp.md), scoped to its tree.

Each operation takes the calling agent (whom its credential names) and refuses any run or
agent outside that agent's own descendants with `OutsideTree`: the same answer for a run that
does not exist and one that belongs to someone else, so a caller learns nothing about other
trees. "Descendants" are the registry's (subagents/queries.py): the runs the caller requested, the
runs its children requested, and so on, breadth first.

Answers are plain JSON-able dicts (the MCP tool results). Errors are the domain's
(`errors.CorralError`); server.py turns them into MCP tool errors.

Must not: import the MCP SDK or grpc; change a run or an agent except through the registry's
and the manager's public methods.
"""

from __future__ import annotations

from corral_server import errors
from corral_server.domain.agent import PermissionBehavior, PermissionResponse
from corral_server.domain.subagents import SubagentRun
from corral_server.domain.timeline import JsonObject, JsonValue
from corral_server.manager.manager import MAX_WAIT_S, AgentManager
from corral_server.mcp.waiters import RunWaiters
from corral_server.subagents import queries as q
from corral_server.subagents.limits import SpawnRequest
from corral_server.subagents.registry import SubagentRegistry
from corral_server.subagents.steer import check_message

# A permission answer's message: the same bound as RespondToPermission's on the wire.
MAX_PERMISSION_MESSAGE_CHARS = 16_384


class OutsideTree(errors.NotFound):
    """A run or agent that is not one of the caller's descendants (or does not exist)."""

    reason = "NOT_YOUR_SUBAGENT"

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(
            f"{what} {ident!r} is not one of your sub-agents: you can only see and control "
            "the sub-agents you (or your sub-agents) spawned",
            metadata={what.replace(" ", "_"): ident},
        )


class SubagentTools:
    def __init__(
        self, registry: SubagentRegistry, manager: AgentManager, waiters: RunWaiters
    ) -> None:
        self._registry = registry
        self._manager = manager
        self._waiters = waiters

    # --- scope ------------------------------------------------------------------------------

    def own_run(self, caller: str, run_id: str) -> SubagentRun:
        """The run, if it is below the caller; else OutsideTree."""
        for run in q.descendant_runs(self._registry.index(), caller):
            if run.run_id == run_id:
                return run
        raise OutsideTree("run", run_id)

    def own_agent(self, caller: str, agent_id: str) -> str:
        """The agent, if a run below the caller made it; else OutsideTree."""
        below = q.descendant_runs(self._registry.index(), caller)
        if agent_id and any(run.child_agent_id == agent_id for run in below):
            return agent_id
        raise OutsideTree("agent", agent_id)

    # --- the tools --------------------------------------------------------------------------

    async def spawn(
        self, caller: str, task: str, label: str = "", provider: str = "", wake: bool = False
    ) -> JsonObject:
        """A new child of the caller on `task` (the registry's limits apply)."""
        max_id = self._manager.limits.max_id_chars
        if len(provider) > max_id:
            raise errors.InvalidArgument.field("provider", f"at most {max_id} chars")
        request = SpawnRequest(
            requester_agent_id=caller,
            task=task,
            provider=provider,
            label=label,
            expects_completion_message=wake,
        )
        return self._view(await self._registry.spawn(request))

    async def list_runs(self, caller: str, active_only: bool = False) -> JsonObject:
        """Every run below the caller, breadth first, with its descendant counts."""
        below = q.descendant_runs(self._registry.index(), caller)
        runs = [r for r in below if not (active_only and r.ended)]
        return {
            "runs": [self._view(r) for r in runs],
            "active_descendants": sum(not r.ended for r in below),
            "pending_descendants": sum(r.pending for r in below),
        }

    async def wait(self, caller: str, run_id: str, timeout_s: float) -> JsonObject:
        """The run once it ended (with its result), or as it is after `timeout_s`."""
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise errors.InvalidArgument.field("timeout_s", f"from 0 to {MAX_WAIT_S:.0f}")
        self.own_run(caller, run_id)
        run = await self._waiters.until_ended(run_id, timeout_s, self._registry.get)
        return self._view(run)

    async def steer(self, caller: str, run_id: str, message: str) -> JsonObject:
        """The run replaced by a new run of its child on `message` (docs/design.md#subagents)."""
        check_message(message)
        self.own_run(caller, run_id)
        return self._view(await self._registry.steer(run_id, message, controller=caller))

    async def kill(self, caller: str, run_id: str, cascade: bool) -> JsonObject:
        """The run (with `cascade` every run below it) ended as KILLED."""
        self.own_run(caller, run_id)
        killed: list[JsonValue] = [*await self._registry.kill(run_id, cascade)]
        return {"killed_run_ids": killed}

    async def answer_permission(
        self, caller: str, agent_id: str, request_id: str, allow: bool, message: str = ""
    ) -> JsonObject:
        """Answer a pending permission of an agent below the caller."""
        self.own_agent(caller, agent_id)
        if len(message) > MAX_PERMISSION_MESSAGE_CHARS:
            raise errors.InvalidArgument.field(
                "message", f"at most {MAX_PERMISSION_MESSAGE_CHARS} chars"
            )
        behavior = PermissionBehavior.ALLOW if allow else PermissionBehavior.DENY
        response = PermissionResponse(behavior, message=message)
        agent = await self._manager.respond_permission(agent_id, request_id, response)
        return {
            "agent_id": agent.id,
            "pending_permissions": [p.id for p in agent.pending_permissions],
        }

    # --- views ------------------------------------------------------------------------------

    def _view(self, run: SubagentRun) -> JsonObject:
        view: JsonObject = {
            "run_id": run.run_id,
            "child_agent_id": run.child_agent_id,
            "requester_agent_id": run.requester_agent_id,
            "task": run.task,
            "label": run.label,
            "depth": run.depth,
            "state": "ended" if run.ended else "running",
            "outcome": run.outcome.value if run.outcome is not None else None,
            "end_reason": run.end_reason,
            "result_text": run.result_text,
            "announce_state": run.announce_state.value,
            "created_at_ms": run.created_at_ms,
            "ended_at_ms": run.ended_at_ms,
            "pending_permissions": self._asking(run.child_agent_id),
        }
        return view

    def _asking(self, agent_id: str) -> list[JsonValue]:
        """The child's pending permissions (what answer_subagent_permission answers)."""
        if not agent_id:
            return []
        try:
            agent = self._manager.get(agent_id)
        except errors.AgentNotFound:
            return []
        return [
            {"request_id": p.id, "name": p.name, "title": p.title, "kind": p.kind}
            for p in agent.pending_permissions
        ]
