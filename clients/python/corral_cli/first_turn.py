"""Following the first turn of an agent `corral run` creates, without a ghost agent.

CreateAgent with `initial_prompt` is all or nothing: an invalid prompt (unknown directive, too
long) creates nothing. Its turn starts before the answer arrives, so `run` follows it through
Subscribe from a revision taken before the create (the order matters):
  1. Subscribe, scoped to no agent, to learn the head revision R (`synced`); stop.
  2. CreateAgent(initial_prompt): the agent and its turn id.
  3. Subscribe(agent_ids=[agent], resume_revision=R): the hub replays every event of the agent
     after R (its turn started, its rows, maybe its end), then goes on live. Nothing the turn
     does can fall between the create and the subscription.
Events of the turn are printed as StreamTurn's would be (the same messages, so `--json` lines
are StreamTurnResponse objects either way).

Must not: invent an outcome. If the daemon no longer holds the revisions (it reset this
subscription) or ends the stream, `run` says so, points at `corral logs`, and exits 1.
"""

from __future__ import annotations

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli import failure
from corral_cli.client import Client, stop
from corral_cli.render import Console
from corral_cli.turn import TurnFollower, interrupt

# Step 1's scope: no agent has this id (agent ids are hex), so its snapshot is empty.
_NO_AGENT = "corral-cli-head-probe"


def head_revision(client: Client) -> tuple[int, str]:
    """Step 1: the revision the daemon's event stream is at now, and the incarnation of its
    event log (a resume into another incarnation is reset, never replayed wrongly)."""
    call = client.events.Subscribe(
        event_pb.SubscribeRequest(agent_ids=[_NO_AGENT]), timeout=client.timeout_s
    )
    try:
        for response in call:
            for event in response.events:
                if event.WhichOneof("payload") == "synced":
                    return event.synced.revision, event.synced.incarnation
    finally:
        stop(call)
    raise RuntimeError("the daemon ended the subscription before `synced`")


def follow_first_turn(
    client: Client, console: Console, agent_id: str, turn_id: str, after: tuple[int, str]
) -> int:
    """Step 3: print the turn's events from `after` (a revision and its incarnation) on; the
    exit code of the turn."""
    revision, incarnation = after
    request = event_pb.SubscribeRequest(
        agent_ids=[agent_id], resume_revision=revision, resume_incarnation=incarnation
    )
    call = client.events.Subscribe(request)
    follower = TurnFollower(console)
    try:
        for response in call:
            for event in response.events:
                exit_code = _handle(console, follower, agent_id, turn_id, event)
                if exit_code is not None:
                    stop(call)
                    return exit_code
    except KeyboardInterrupt:
        stop(call)
        return interrupt(client, console, agent_id)
    console.error(f"error: the stream ended before the turn did; see `corral logs {agent_id}`")
    return failure.EXIT_FAILED


def _handle(
    console: Console, follower: TurnFollower, agent_id: str, turn_id: str, event: event_pb.Event
) -> int | None:
    match event.WhichOneof("payload"):
        case "subscription_reset":
            console.error(
                "error: the daemon no longer holds this turn's first events; "
                f"see `corral logs {agent_id}`"
            )
            return failure.EXIT_FAILED
        case "stream_ending":
            ending = event.stream_ending
            console.error(
                f"error: the daemon ended the stream ({ending.reason or 'no reason given'}) before "
                f"the turn ended; see `corral logs {agent_id}`"
            )
            return failure.EXIT_FAILED
        case _:
            turn_event = as_turn_event(event, turn_id)
            return None if turn_event is None else follower.handle(turn_event)


def as_turn_event(event: event_pb.Event, turn_id: str) -> turn_pb.StreamTurnResponse | None:
    """The StreamTurn event `event` stands for, if it belongs to turn `turn_id`. Rows without
    a turn id (a provider's history replay, `/history`) are left out, as StreamTurn leaves
    them out, so `run` and `send -f` print the same for the same prompt."""
    match event.WhichOneof("payload"):
        case "turn_started" if event.turn_started.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(turn_started=event.turn_started)
        case "timeline_row_appended" if event.timeline_row_appended.row.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(row=event.timeline_row_appended.row)
        case "permission_requested" if event.permission_requested.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(permission_requested=event.permission_requested)
        case "permission_resolved" if event.permission_resolved.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(permission_resolved=event.permission_resolved)
        case "turn_completed" if event.turn_completed.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(turn_completed=event.turn_completed)
        case "turn_failed" if event.turn_failed.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(turn_failed=event.turn_failed)
        case "turn_canceled" if event.turn_canceled.turn_id == turn_id:
            return turn_pb.StreamTurnResponse(turn_canceled=event.turn_canceled)
        case _:
            return None
