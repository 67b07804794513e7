"""The end of a turn as values (manager/turn_end.py): snapshot, closing row, attention."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    AgentError,
    AgentId,
    Attention,
    AttentionReason,
    Errored,
    Idle,
    QueuedBy,
    QueuedPrompt,
    Running,
    Usage,
)
from corral_server.domain.content import TextPart
from corral_server.domain.timeline import ErrorItem
from corral_server.manager.turn_end import TURN_CANCELED, TurnCounts, end_turn

NOW = 5_000
OLD_USAGE = Usage(input_tokens=1)
RUNNING = Agent(
    id=AgentId("a"),
    provider="scripted",
    cwd="/",
    lifecycle=Running("t1"),
    created_at_ms=1,
    updated_at_ms=2,
    epoch="e",
    next_seq=3,
    last_usage=OLD_USAGE,
    usage_total=Usage(input_tokens=100, output_tokens=5, cost_usd=0.5),
)
ERROR = AgentError("it broke", "BROKE")
COMPLETED = ev.TurnCompleted("a", "t1", Usage(input_tokens=7))
FAILED = ev.TurnFailed("a", "t1", ERROR)
CANCELED = ev.TurnCanceled("a", "t1", "user asked")


def test_a_completed_turn_leaves_the_agent_idle_with_its_usage_added_and_marked_finished() -> None:
    end = end_turn(RUNNING, COMPLETED, False, NOW)
    assert end.snapshot == replace(
        RUNNING,
        lifecycle=Idle(),
        last_usage=Usage(input_tokens=7),
        usage_total=Usage(input_tokens=107, output_tokens=5, cost_usd=0.5),
        attention=Attention(True, AttentionReason.FINISHED, NOW),
    )
    assert end.ended == Idle() and end.closing_row is None
    assert end.attention is AttentionReason.FINISHED


def test_a_completed_turn_without_usage_keeps_the_last_usage() -> None:
    end = end_turn(RUNNING, ev.TurnCompleted("a", "t1"), False, NOW)
    assert end.snapshot.last_usage == OLD_USAGE
    assert end.snapshot.usage_total == RUNNING.usage_total


def test_a_failed_turn_errors_the_agent_with_an_error_row_and_error_attention() -> None:
    end = end_turn(RUNNING, FAILED, False, NOW)
    assert end.snapshot == replace(
        RUNNING,
        lifecycle=Errored(ERROR),
        last_error=ERROR,
        attention=Attention(True, AttentionReason.ERROR, NOW),
    )
    assert end.ended == Errored(ERROR)
    assert end.closing_row == ErrorItem("it broke", "BROKE")
    assert end.attention is AttentionReason.ERROR


@pytest.mark.parametrize(
    ("reason", "text"), [("user asked", "turn canceled: user asked"), ("", "turn canceled")]
)
def test_a_canceled_turn_goes_idle_with_a_row_saying_why_and_no_attention(
    reason: str, text: str
) -> None:
    end = end_turn(RUNNING, ev.TurnCanceled("a", "t1", reason), False, NOW)
    assert end.snapshot == replace(RUNNING, lifecycle=Idle())
    assert end.closing_row == ErrorItem(text, TURN_CANCELED)
    assert end.attention is None


def test_with_a_successor_the_agent_stays_running_and_nobody_is_told_finished() -> None:
    end = end_turn(RUNNING, COMPLETED, True, NOW)
    assert end.snapshot.lifecycle == Running("t1")
    assert end.ended == Idle()  # shown if the successor never starts
    assert end.attention is None and not end.snapshot.attention.required


def test_with_a_successor_a_failure_still_raises_attention() -> None:
    queued = QueuedPrompt("m1", (TextPart("next"),), 1, QueuedBy.CLIENT)
    agent = replace(RUNNING, queued_prompts=(queued,))
    end = end_turn(agent, FAILED, True, NOW)
    assert end.snapshot.lifecycle == Running("t1")
    assert end.snapshot.last_error == ERROR and end.ended == Errored(ERROR)
    assert end.attention is AttentionReason.ERROR
    assert end.snapshot.queued_prompts == (queued,)


def test_attention_is_edge_triggered_an_agent_already_marked_is_not_marked_again() -> None:
    marked = Attention(True, AttentionReason.PERMISSION, 10)
    end = end_turn(replace(RUNNING, attention=marked), FAILED, False, NOW)
    assert end.attention is None
    assert end.snapshot.attention == marked


def test_turn_counts_count_each_end_by_its_kind() -> None:
    counts = TurnCounts()
    for terminal in (COMPLETED, FAILED, FAILED, CANCELED):
        counts.count_end(terminal)
    assert (counts.completed, counts.failed, counts.canceled) == (1, 2, 1)
