"""StreamTurn's view of the hub: one agent's Subscribe batches in, one turn's responses out.

A started or replacing turn is known by its id at once. A steered prompt joins the running
turn (a turn_started is sent first, for the client). A queued prompt has no turn yet: it is
recognised when the agent's snapshot shows it left the queue and a new turn running; if it
left the queue otherwise (removed), or the agent errored or closed with it still queued, the
stream ends with an error instead of waiting for ever.

Must not: keep state beyond one StreamTurn call, or encode anything (it reads the hub's bytes).
"""

from __future__ import annotations

from collections.abc import Iterator

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server import errors
from corral_server.manager.turns import Disposition, StartedTurn

R = turn_pb.StreamTurnResponse
TERMINALS = ("turn_completed", "turn_failed", "turn_canceled")


class TurnFollower:
    def __init__(self, agent_id: str, started: StartedTurn) -> None:
        self.agent_id = agent_id
        self.turn_id = started.turn_id
        self.client_message_id = started.client_message_id
        self.queued = started.disposition is Disposition.QUEUED
        self.steered = started.disposition is Disposition.STEERED
        self.done = False
        # While queued: the turn the agent ran when last seen (to tell a start from a removal).
        self._last_running: str | None = None

    def opening(self) -> Iterator[R]:
        """What the client gets before any event: a steered prompt's turn is already running."""
        if self.steered:
            yield R(turn_started=turn_pb.TurnStarted(agent_id=self.agent_id, turn_id=self.turn_id))

    def responses(self, batch: bytes) -> Iterator[R]:
        """The responses for this turn in one Subscribe batch, in order; the terminal last.
        Raises ShuttingDown when the hub ended the stream, SubscriberLagged when it reset it."""
        for event in event_pb.SubscribeResponse.FromString(batch).events:
            kind = event.WhichOneof("payload")
            if kind == "stream_ending":
                raise errors.ShuttingDown()
            if kind == "subscription_reset":
                raise errors.SubscriberLagged(
                    "this StreamTurn fell too far behind its turn; read the rest with "
                    "FetchTimeline (the turn goes on)"
                )
            if self.queued:
                if kind == "agent_upserted":
                    self._watch_queue(event.agent_upserted.agent)
                continue
            yield from self._of_turn(kind, event)
            if self.done:
                return

    def _of_turn(self, kind: str | None, event: event_pb.Event) -> Iterator[R]:
        turn_id = self.turn_id
        match kind:
            case "turn_started" if event.turn_started.turn_id == turn_id:
                yield R(turn_started=event.turn_started)
            case "timeline_row_appended" if event.timeline_row_appended.row.turn_id == turn_id:
                yield R(row=event.timeline_row_appended.row)
            case "permission_requested" if event.permission_requested.turn_id == turn_id:
                yield R(permission_requested=event.permission_requested)
            case "permission_resolved" if event.permission_resolved.turn_id == turn_id:
                yield R(permission_resolved=event.permission_resolved)
            case "turn_completed" if event.turn_completed.turn_id == turn_id:
                if event.turn_completed.HasField("usage"):
                    yield R(usage=event.turn_completed.usage)
                yield R(turn_completed=event.turn_completed)
                self.done = True
            case "turn_failed" if event.turn_failed.turn_id == turn_id:
                yield R(turn_failed=event.turn_failed)
                self.done = True
            case "turn_canceled" if event.turn_canceled.turn_id == turn_id:
                yield R(turn_canceled=event.turn_canceled)
                self.done = True
            case _:
                pass  # other turns, other events of the agent, `synced`

    def _watch_queue(self, agent: agent_pb.Agent) -> None:
        """While queued: the upsert that takes the prompt out of the queue and runs a new
        turn names that turn; leaving the queue any other way means it was removed."""
        state = agent.lifecycle.WhichOneof("state")
        running = agent.lifecycle.running.active_turn_id if state == "running" else None
        if any(q.client_message_id == self.client_message_id for q in agent.queued_prompts):
            if state in ("errored", "closed", "idle"):
                raise errors.FailedPrecondition(
                    f"the agent is {state} and prompt {self.client_message_id!r} is still "
                    "queued: it starts after the agent's next turn"
                )
            self._last_running = running
            return
        if running is None or running == self._last_running:
            raise errors.FailedPrecondition(
                f"queued prompt {self.client_message_id!r} was removed before it started"
            )
        self.turn_id = running
        self.queued = False
