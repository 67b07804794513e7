"""The coalescer never makes a row bigger than its limit: long text is split, never dropped."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain.timeline import (
    MAX_ROW_BYTES,
    AssistantMessage,
    ErrorItem,
    Reasoning,
    ToolCall,
    ToolCallStatus,
)
from corral_server.manager.coalescer import Coalescer
from corral_server.providers.base import ProviderItem
from corral_server.timeline.size import item_bytes
from corral_server.timeline.store import NewRow

TURN = "turn-1"
LIMIT = 100  # bytes a row may hold in these tests


def feed(
    coalescer: Coalescer, items: list[AssistantMessage | Reasoning], now_ms: int = 1
) -> list[NewRow]:
    rows: list[NewRow] = []
    for item in items:
        rows += coalescer.offer(ProviderItem(TURN, item), now_ms).ready
    last = coalescer.flush()
    return rows + ([last] if last is not None else [])


def text_of(row: NewRow) -> str:
    assert isinstance(row.item, AssistantMessage | Reasoning)
    return row.item.text


def test_the_default_limit_is_max_row_bytes() -> None:
    rows = feed(Coalescer(), [AssistantMessage("x" * (MAX_ROW_BYTES + 10), "m1")])
    assert len(rows) == 2
    assert all(item_bytes(row.item) <= MAX_ROW_BYTES for row in rows)


def test_a_message_that_outgrows_a_row_continues_in_the_next_row_of_the_same_message() -> None:
    coalescer = Coalescer(max_row_bytes=LIMIT)
    first = coalescer.offer(ProviderItem(TURN, AssistantMessage("a" * 60, "m1")), 1)
    assert first.ready == () and first.arm_timer
    second = coalescer.offer(ProviderItem(TURN, AssistantMessage("b" * 60, "m1")), 2)
    assert len(second.ready) == 1  # the full row is ready at once
    full = second.ready[0]
    assert full.timestamp_ms == 1 and full.item == AssistantMessage(text_of(full), "m1")
    assert item_bytes(full.item) <= LIMIT
    rest = coalescer.flush()
    assert rest is not None and rest.timestamp_ms == 2
    assert rest.item == AssistantMessage(text_of(rest), "m1")
    assert text_of(full) + text_of(rest) == "a" * 60 + "b" * 60


def test_one_huge_fragment_becomes_full_rows_and_a_pending_rest() -> None:
    coalescer = Coalescer(max_row_bytes=LIMIT)
    offered = coalescer.offer(ProviderItem(TURN, Reasoning("é" * 200)), 5)
    assert len(offered.ready) == 4 and offered.arm_timer
    rest = coalescer.flush()
    assert rest is not None
    assert "".join(text_of(r) for r in (*offered.ready, rest)) == "é" * 200


@given(
    fragments=st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=20),
    reasoning=st.booleans(),
)
def test_split_rows_join_back_to_the_message_and_each_fits(
    fragments: list[str], reasoning: bool
) -> None:
    items: list[AssistantMessage | Reasoning] = [
        Reasoning(f) if reasoning else AssistantMessage(f, "m1") for f in fragments
    ]
    rows = feed(Coalescer(max_row_bytes=LIMIT), items)
    assert "".join(text_of(r) for r in rows) == "".join(fragments)
    assert all(item_bytes(r.item) <= LIMIT for r in rows)
    # each row but the last is as full as a character boundary allows
    for row, after in itertools.pairwise(rows):
        bigger = AssistantMessage(text_of(row) + text_of(after)[0], "m1")
        assert item_bytes(bigger if not reasoning else Reasoning(bigger.text)) > LIMIT


def test_a_tool_call_too_big_is_cut_not_dropped() -> None:
    coalescer = Coalescer(max_row_bytes=1_000)
    call = ToolCall("c1", "bash", ToolCallStatus.COMPLETED, {"cmd": "cat"}, "o" * 5_000)
    (row,) = coalescer.offer(ProviderItem(TURN, call), 1).ready
    assert isinstance(row.item, ToolCall)
    assert item_bytes(row.item) <= 1_000
    assert isinstance(row.item.output, str) and "[cut by corral: " in row.item.output


def test_a_pending_tool_call_too_big_is_cut_too() -> None:
    coalescer = Coalescer(max_row_bytes=1_000)
    call = ToolCall("c1", "bash", ToolCallStatus.RUNNING, "i" * 5_000)
    assert coalescer.offer(ProviderItem(TURN, call), 1).ready == ()
    row = coalescer.flush()
    assert row is not None and item_bytes(row.item) <= 1_000


def test_any_other_item_too_big_is_cut() -> None:
    coalescer = Coalescer(max_row_bytes=1_000)
    (row,) = coalescer.offer(ProviderItem(TURN, ErrorItem("e" * 5_000)), 1).ready
    assert isinstance(row.item, ErrorItem) and item_bytes(row.item) <= 1_000
