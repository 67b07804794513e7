"""Following one turn through StreamTurn (`corral run`, `corral send --follow`), and what
Ctrl-C does to it: stop reading, ask the daemon to cancel the turn, report the outcome.

Exit codes: 0 when the turn completes, 1 when it fails or is canceled by someone else, 130
after Ctrl-C.

Must not: invent an outcome. A stream that ends without a terminal event is reported as such,
and Ctrl-C prints what CancelTurn answered (a refused cancel leaves the turn running).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli import failure
from corral_cli.client import Client, stop
from corral_cli.progress import waiting
from corral_cli.render import (
    Console,
    TurnPrinter,
    permission_asked,
    permission_ended,
    state_label,
)


def cancel_outcome(value: int) -> str:
    """`CANCEL_OUTCOME_NOT_RUNNING` -> `not_running`."""
    found = turn_pb.CancelOutcome.DESCRIPTOR.values_by_number.get(value)
    return found.name.removeprefix("CANCEL_OUTCOME_").lower() if found else str(value)


@contextmanager
def cancel_wait(console: Console, agent_id: str) -> Iterator[None]:
    """The progress line of a CancelTurn call: a provider that keeps its turn going is known
    only after the daemon's settle wait."""
    with waiting(
        console, f"agent {agent_id}'s turn to stop", "the daemon's settle wait, 10 s by default"
    ):
        yield


def stream_turn(client: Client, console: Console, request: turn_pb.StreamTurnRequest) -> int:
    """Send the prompt, print the turn as it streams, and return the exit code."""
    call = client.turns.StreamTurn(request)
    follower = TurnFollower(console)
    try:
        for event in call:
            exit_code = follower.handle(event)
            if exit_code is not None:
                return exit_code
    except KeyboardInterrupt:
        stop(call)
        return interrupt(client, console, request.agent_id)
    console.error("error: the turn's stream ended before the turn did (daemon stopping?)")
    return failure.EXIT_FAILED


def interrupt(client: Client, console: Console, agent_id: str) -> int:
    """After Ctrl-C: CancelTurn, print its outcome, exit 130 whatever it was."""
    console.note("interrupted: canceling the turn…")
    try:
        with cancel_wait(console, agent_id):
            resp = client.turns.CancelTurn(
                turn_pb.CancelTurnRequest(agent_id=agent_id), timeout=client.timeout_s
            )
    except KeyboardInterrupt:
        console.note("not waiting for the cancel; the turn may still be running")
        return failure.EXIT_INTERRUPTED
    except grpc.RpcError as exc:
        for line in failure.describe(failure.decode(exc), client.addr):
            console.error(line)
        return failure.EXIT_INTERRUPTED
    console.note(f"cancel: {cancel_outcome(resp.outcome)} (agent {state_label(resp.agent)})")
    return failure.EXIT_INTERRUPTED


class TurnFollower:
    """Prints each StreamTurn event; returns an exit code once the turn has ended."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.printer = TurnPrinter(console)

    def handle(self, event: turn_pb.StreamTurnResponse) -> int | None:
        if self.console.json:
            self.console.message(event)
        kind = event.WhichOneof("event")
        if not self.console.json:
            self._show(event)
        match kind:
            case "turn_completed":
                return failure.EXIT_OK
            case "turn_failed" | "turn_canceled":
                return failure.EXIT_FAILED
            case _:
                return None

    def _show(self, event: turn_pb.StreamTurnResponse) -> None:
        note = self.console.note
        match event.WhichOneof("event"):
            case "turn_started" | "turn_completed" | "turn_failed" | "turn_canceled":
                self.printer.boundary(event)
            case "row":
                self.printer.row(event.row)
            case "permission_requested":
                requested = event.permission_requested
                note(permission_asked(requested.agent_id, requested.permission))
            case "permission_resolved":
                note(permission_ended(event.permission_resolved))
            case _:
                pass  # usage: nothing to add to the reply
