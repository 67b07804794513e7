"""How a turn ends, as values: from the agent, the turn's terminal event and whether a
successor follows, the snapshot the agent ends in, the row that says how the turn ended, and
the attention to raise. A pure function: the actor (actor.py `_finish`) stores the row,
publishes the events and sets the snapshot in the order the stream promises.

The rules:
- completed: idle, with the turn's usage (the last one kept when it reports none) added to
  the agent's total; attention FINISHED;
- failed: errored, with its error as `last_error` and an error row; attention ERROR;
- canceled: idle, with a row saying it was canceled and why; no attention;
- a successor follows (a replacement, the next queued prompt): the agent keeps its Running
  lifecycle, with no idle moment between, and nobody is told "finished" (an error still
  raises attention);
- attention is edge-triggered: an unread mark set once, so an agent already marked is not
  marked again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import assert_never

from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    Attention,
    AttentionReason,
    Errored,
    Idle,
    Lifecycle,
)
from corral_server.domain.timeline import ErrorItem
from corral_server.domain.usage import add

# The code of the row that records a canceled turn in the timeline.
TURN_CANCELED = "TURN_CANCELED"


@dataclass(frozen=True, slots=True)
class TurnEnd:
    # The agent after the turn (Running still, when a successor follows).
    snapshot: Agent
    # The lifecycle the turn ended in: shown once nothing follows it.
    ended: Lifecycle
    # The row saying how the turn ended (None for a completed turn).
    closing_row: ErrorItem | None
    # The attention to raise with the snapshot (None: none).
    attention: AttentionReason | None


def end_turn(agent: Agent, terminal: ev.TurnTerminal, successor: bool, now_ms: int) -> TurnEnd:
    """The end of `agent`'s running turn by `terminal` (see the module docstring)."""
    reason: AttentionReason | None = None
    closing_row: ErrorItem | None = None
    match terminal:
        case ev.TurnCompleted(usage=usage):
            ended = replace(
                agent,
                lifecycle=Idle(),
                last_usage=usage or agent.last_usage,
                usage_total=agent.usage_total if usage is None else add(agent.usage_total, usage),
            )
            reason = AttentionReason.FINISHED
        case ev.TurnFailed(error=error):
            closing_row = ErrorItem(error.message, error.code)
            ended = replace(agent, lifecycle=Errored(error), last_error=error)
            reason = AttentionReason.ERROR
        case ev.TurnCanceled(reason=why):
            # The timeline keeps a trace of the cancel and why, like a failure's error row.
            text = f"turn canceled: {why}" if why else "turn canceled"
            closing_row = ErrorItem(text, TURN_CANCELED)
            ended = replace(agent, lifecycle=Idle())
        case _:
            assert_never(terminal)
    lifecycle = ended.lifecycle
    if successor:
        ended = replace(ended, lifecycle=agent.lifecycle)
        if reason is AttentionReason.FINISHED:
            reason = None
    if reason is not None and agent.attention.required:
        reason = None
    if reason is not None:
        ended = replace(ended, attention=Attention(True, reason, now_ms))
    return TurnEnd(ended, lifecycle, closing_row, reason)


@dataclass(slots=True)
class TurnCounts:
    """Turns since the daemon started, by what happened to them: plain counters the
    metrics endpoint reads (the actor adds one per turn start and end)."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    canceled: int = 0
    # Agent processes restarted because their provider entry changed (actor_live.py).
    restarts: int = 0

    def count_end(self, terminal: ev.TurnTerminal) -> None:
        match terminal:
            case ev.TurnCompleted():
                self.completed += 1
            case ev.TurnFailed():
                self.failed += 1
            case ev.TurnCanceled():
                self.canceled += 1
            case _:
                assert_never(terminal)
