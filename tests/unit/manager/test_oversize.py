"""manager/oversize.py: the split and cut rules that keep every row within MAX_ROW_BYTES."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_server.domain.timeline import (
    MAX_ROW_BYTES,
    AssistantMessage,
    ErrorItem,
    JsonValue,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.manager.oversize import cut_text, fit_item, text_pieces
from corral_server.timeline.size import item_bytes


@given(text=st.text(), max_bytes=st.integers(4, 40))
def test_text_pieces_join_back_and_each_is_as_full_as_a_character_boundary_allows(
    text: str, max_bytes: int
) -> None:
    pieces = text_pieces(text, max_bytes)
    assert "".join(pieces) == text
    sizes = [len(p.encode()) for p in pieces]
    assert all(size <= max_bytes for size in sizes)
    for piece, after in itertools.pairwise(pieces):
        # the next character would not have fitted
        assert len((piece + after[0]).encode()) > max_bytes


def test_text_pieces_never_cut_inside_a_character() -> None:
    assert text_pieces("é" * 5, 5) == ["éé", "éé", "é"]
    assert text_pieces("a😀b", 4) == ["a", "😀", "b"]
    assert text_pieces("", 10) == [""]


def test_cut_text_keeps_the_beginning_and_names_the_original_size() -> None:
    cut = cut_text("x" * 1_000, 100)
    assert cut.startswith("xxx") and cut.endswith("… [cut by corral: 1000 bytes]")
    assert len(cut.encode()) <= 100
    assert cut_text("short", 100) == "short"


def test_an_item_that_fits_is_returned_as_the_same_object() -> None:
    call = ToolCall("c1", "bash", ToolCallStatus.COMPLETED, {"cmd": "ls"}, "ok")
    assert fit_item(call) is call


def test_a_huge_tool_output_becomes_its_json_text_cut_with_a_marker() -> None:
    output: JsonValue = {"lines": [f"line {i}" for i in range(400_000)]}
    call = ToolCall("c1", "bash", ToolCallStatus.COMPLETED, {"cmd": "seq"}, output)
    fitted = fit_item(call)
    assert isinstance(fitted, ToolCall)
    assert item_bytes(fitted) <= MAX_ROW_BYTES
    assert fitted.input == {"cmd": "seq"}  # small fields are kept whole
    assert (fitted.call_id, fitted.name, fitted.status) == ("c1", "bash", ToolCallStatus.COMPLETED)
    assert isinstance(fitted.output, str)
    size = len(json.dumps(output, separators=(",", ":")).encode())
    assert fitted.output.startswith('{"lines":["line 0","line 1"')
    assert fitted.output.endswith(f"… [cut by corral: {size} bytes of JSON]")


def test_two_big_fields_are_cut_to_one_common_size() -> None:
    call = ToolCall("c1", "write", ToolCallStatus.FAILED, "i" * 3_000_000, None, "e" * 3_000_000)
    fitted = fit_item(call)
    assert isinstance(fitted, ToolCall)
    assert item_bytes(fitted) <= MAX_ROW_BYTES
    assert isinstance(fitted.input, str)
    assert abs(len(fitted.input) - len(fitted.error)) < 64
    assert len(fitted.error) > MAX_ROW_BYTES // 2 - 100  # no more is cut than needed


@pytest.mark.parametrize(
    "item",
    [
        ErrorItem("boom " * 1_000_000, "E"),
        UserMessage("é" * 2_000_000, "client-1", "client-1"),
    ],
)
def test_any_other_big_text_is_cut_with_a_marker(item: ErrorItem | UserMessage) -> None:
    fitted = fit_item(item)
    assert item_bytes(fitted) <= MAX_ROW_BYTES
    assert isinstance(fitted, ErrorItem | UserMessage)
    text = fitted.message if isinstance(fitted, ErrorItem) else fitted.text
    assert "… [cut by corral: " in text


def test_a_huge_todo_keeps_its_first_entries_and_counts_the_rest() -> None:
    todo = Todo(tuple(TodoEntry(f"step {i} " + "x" * 1_000) for i in range(5_000)))
    fitted = fit_item(todo)
    assert isinstance(fitted, Todo)
    assert item_bytes(fitted) <= MAX_ROW_BYTES
    kept = len(fitted.entries) - 1
    assert fitted.entries[:kept] == todo.entries[:kept]
    assert fitted.entries[-1].text.startswith(f"[cut by corral: {5_000 - kept} more entries, ")


def test_streamed_text_is_not_cut_but_split_by_the_coalescer() -> None:
    with pytest.raises(ValueError, match="split"):
        fit_item(AssistantMessage("x" * (MAX_ROW_BYTES + 1)))
