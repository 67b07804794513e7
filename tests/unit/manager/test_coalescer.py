"""The coalescer joins streaming fragments into whole rows (docs/design.md#coalescing)."""

from __future__ import annotations

from corral_server.domain.timeline import (
    AssistantMessage,
    ErrorItem,
    Reasoning,
    TimelineItem,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
)
from corral_server.manager.coalescer import WINDOW_MS, Coalescer, Offered
from corral_server.providers.base import ProviderItem
from corral_server.timeline.store import NewRow

TURN = "turn-1"


def offer(coalescer: Coalescer, item: TimelineItem, now_ms: int, message_id: str = "") -> Offered:
    return coalescer.offer(ProviderItem(TURN, item, message_id), now_ms)


def texts(rows: tuple[NewRow, ...] | list[NewRow]) -> list[str]:
    out = []
    for row in rows:
        assert isinstance(row.item, AssistantMessage | Reasoning)
        out.append(row.item.text)
    return out


def tool(call_id: str, status: ToolCallStatus, output: str | None = None) -> ToolCall:
    return ToolCall(call_id, "bash", status, input={"cmd": "ls"}, output=output)


def test_the_window_is_sixty_milliseconds_as_the_seed_says() -> None:
    assert WINDOW_MS == 60


def test_empty_text_fragments_are_swallowed_without_arming_a_timer() -> None:
    coalescer = Coalescer()
    assert offer(coalescer, AssistantMessage(""), 1) == Offered((), False)
    assert offer(coalescer, Reasoning(""), 2) == Offered((), False)
    assert not coalescer.has_pending
    assert coalescer.flush() is None


def test_an_empty_fragment_does_not_break_a_message_being_joined() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("Hel", "m1"), 1)
    offer(coalescer, AssistantMessage("", "m1"), 2)
    offer(coalescer, AssistantMessage("lo", "m1"), 3)
    row = coalescer.flush()
    assert row is not None
    assert texts([row]) == ["Hello"]


def test_the_first_fragment_becomes_pending_and_arms_the_timer() -> None:
    coalescer = Coalescer()
    offered = offer(coalescer, AssistantMessage("Hi", "m1"), 10)
    assert offered == Offered((), True)
    assert coalescer.has_pending


def test_consecutive_chunks_of_one_message_are_joined_into_one_row() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("You ", "m1"), 10)
    later = [offer(coalescer, AssistantMessage(t, "m1"), 20 + i) for i, t in enumerate("said")]
    # Joining never asks for another timer: the first fragment's timer still stands.
    assert all(o == Offered((), False) for o in later)
    row = coalescer.flush()
    assert row is not None
    assert row.item == AssistantMessage("You said", "m1")
    assert row.turn_id == TURN
    assert coalescer.flush() is None


def test_chunks_keyed_by_provider_message_id_are_joined() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("a"), 1, message_id="pm-1")
    offer(coalescer, AssistantMessage("b"), 2, message_id="pm-1")
    row = coalescer.flush()
    assert row is not None
    assert texts([row]) == ["ab"]
    assert row.provider_message_id == "pm-1"


def test_chunks_with_different_provider_message_ids_are_separate_rows() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("a"), 1, message_id="pm-1")
    offered = offer(coalescer, AssistantMessage("b"), 2, message_id="pm-2")
    assert texts(offered.ready) == ["a"]
    assert offered.ready[0].provider_message_id == "pm-1"


def test_the_joined_row_keeps_the_first_fragments_timestamp() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("a", "m1"), 100)
    offer(coalescer, AssistantMessage("b", "m1"), 150)
    row = coalescer.flush()
    assert row is not None
    assert row.timestamp_ms == 100


def test_a_different_message_id_flushes_the_previous_message() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("first", "m1"), 1)
    offered = offer(coalescer, AssistantMessage("second", "m2"), 2)
    assert texts(offered.ready) == ["first"]
    assert offered.arm_timer
    row = coalescer.flush()
    assert row is not None
    assert row.item == AssistantMessage("second", "m2")
    assert row.timestamp_ms == 2


def test_reasoning_and_assistant_text_are_never_joined() -> None:
    coalescer = Coalescer()
    offer(coalescer, Reasoning("think"), 1)
    offered = offer(coalescer, AssistantMessage("say"), 2)
    assert offered.ready == (NewRow(Reasoning("think"), 1, TURN),)
    row = coalescer.flush()
    assert row is not None
    assert row.item == AssistantMessage("say")


def test_consecutive_reasoning_fragments_are_joined() -> None:
    coalescer = Coalescer()
    offer(coalescer, Reasoning("hmm, "), 1)
    offer(coalescer, Reasoning("yes"), 2)
    assert coalescer.flush() == NewRow(Reasoning("hmm, yes"), 1, TURN)


def test_fragments_of_different_turns_are_not_joined() -> None:
    coalescer = Coalescer()
    coalescer.offer(ProviderItem("turn-1", AssistantMessage("a")), 1)
    offered = coalescer.offer(ProviderItem("turn-2", AssistantMessage("b")), 2)
    assert texts(offered.ready) == ["a"]
    assert coalescer.flush() == NewRow(AssistantMessage("b"), 2, "turn-2")


def test_tool_call_updates_with_the_same_call_id_replace_each_other() -> None:
    coalescer = Coalescer()
    first = offer(coalescer, tool("c1", ToolCallStatus.PENDING), 5)
    second = offer(coalescer, tool("c1", ToolCallStatus.RUNNING), 9)
    assert first == Offered((), True)
    assert second == Offered((), False)  # no new row, no second timer
    row = coalescer.flush()
    assert row is not None
    assert row.item == tool("c1", ToolCallStatus.RUNNING)
    assert row.timestamp_ms == 5  # the first update's time


def test_a_terminal_tool_status_is_emitted_at_once_replacing_its_pending_update() -> None:
    coalescer = Coalescer()
    offer(coalescer, tool("c1", ToolCallStatus.RUNNING), 5)
    offered = offer(coalescer, tool("c1", ToolCallStatus.COMPLETED, output="ok"), 9)
    assert offered == Offered((NewRow(tool("c1", ToolCallStatus.COMPLETED, "ok"), 5, TURN),), False)
    assert not coalescer.has_pending


def test_a_terminal_tool_status_with_nothing_pending_is_emitted_at_once() -> None:
    coalescer = Coalescer()
    for status in (ToolCallStatus.FAILED, ToolCallStatus.CANCELED):
        offered = offer(coalescer, tool("c9", status), 3)
        assert offered == Offered((NewRow(tool("c9", status), 3, TURN),), False)
        assert not coalescer.has_pending


def test_a_terminal_tool_status_flushes_pending_text_first() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("let me look"), 1)
    offered = offer(coalescer, tool("c1", ToolCallStatus.COMPLETED), 2)
    assert offered.ready == (
        NewRow(AssistantMessage("let me look"), 1, TURN),
        NewRow(tool("c1", ToolCallStatus.COMPLETED), 2, TURN),
    )


def test_a_tool_call_with_another_call_id_flushes_the_pending_one() -> None:
    coalescer = Coalescer()
    offer(coalescer, tool("c1", ToolCallStatus.RUNNING), 1)
    offered = offer(coalescer, tool("c2", ToolCallStatus.RUNNING), 2)
    assert offered == Offered((NewRow(tool("c1", ToolCallStatus.RUNNING), 1, TURN),), True)
    assert coalescer.flush() == NewRow(tool("c2", ToolCallStatus.RUNNING), 2, TURN)


def test_other_items_flush_the_pending_row_first_and_pass_through() -> None:
    for other in (
        Todo((TodoEntry("write tests"),)),
        ErrorItem("boom", "E1"),
    ):
        coalescer = Coalescer()
        offer(coalescer, AssistantMessage("partial"), 1)
        offered = offer(coalescer, other, 2)
        assert offered == Offered(
            (NewRow(AssistantMessage("partial"), 1, TURN), NewRow(other, 2, TURN)), False
        )
        assert not coalescer.has_pending


def test_other_items_with_nothing_pending_pass_through_alone() -> None:
    coalescer = Coalescer()
    offered = offer(coalescer, ErrorItem("boom"), 7)
    assert offered == Offered((NewRow(ErrorItem("boom"), 7, TURN),), False)


def test_text_after_an_interrupting_item_starts_a_new_row() -> None:
    coalescer = Coalescer()
    offer(coalescer, AssistantMessage("one", "m1"), 1)
    offer(coalescer, ErrorItem("x"), 2)
    offered = offer(coalescer, AssistantMessage("two", "m1"), 3)
    assert offered == Offered((), True)
    assert coalescer.flush() == NewRow(AssistantMessage("two", "m1"), 3, TURN)
