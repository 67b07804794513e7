"""Which tool outputs are kept apart from their rows, and what the row keeps."""

from __future__ import annotations

import json

from corral_server.domain.timeline import ToolCall, ToolCallStatus, UserMessage
from corral_server.manager.tool_output import PREVIEW_BYTES, SPILL_BYTES, spill


def call(output: object) -> ToolCall:
    return ToolCall("c", "shell", ToolCallStatus.COMPLETED, output=output)  # type: ignore[arg-type]


def test_an_output_at_the_threshold_stays_in_its_row() -> None:
    item = call("x" * SPILL_BYTES)
    assert spill(item) == (item, None)
    assert spill(UserMessage("x" * (SPILL_BYTES + 1))) == (
        UserMessage("x" * (SPILL_BYTES + 1)),
        None,
    )


def test_a_text_over_it_keeps_a_preview_cut_between_characters() -> None:
    text = "é" * SPILL_BYTES  # two bytes each
    item, data = spill(call(text))
    assert isinstance(item, ToolCall) and item.output_ref is not None and data is not None
    assert data == text.encode() and item.output_ref.size_bytes == len(data)
    assert item.output == "é" * (PREVIEW_BYTES // 2) and not item.output_ref.json


def test_a_json_value_over_it_is_kept_as_its_compact_json_text() -> None:
    value = {"lines": ["y" * 1000] * 300}
    item, data = spill(call(value))
    assert isinstance(item, ToolCall) and item.output_ref is not None and data is not None
    assert item.output_ref.json and json.loads(data) == value
    assert isinstance(item.output, str) and data.startswith(item.output.encode())
