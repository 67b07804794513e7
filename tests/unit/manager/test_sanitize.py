"""manager/sanitize.py: whatever a provider reports, the sanitized item encodes."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings

from corral.v1 import event_service_pb2 as event_pb
from corral_server.domain import events as de
from corral_server.domain import timeline as dt
from corral_server.manager.sanitize import (
    MAX_JSON_DEPTH,
    sanitize_item,
    sanitize_json,
    sanitize_text,
)
from corral_server.rpc import convert, wire
from tests.support.items import clean_items, hostile_items


@settings(max_examples=400, deadline=None)
@given(item=hostile_items)
def test_any_sanitized_item_encodes_and_a_client_decodes_it(item: Any) -> None:
    clean = sanitize_item(item)
    convert.item_to_pb(clean).SerializeToString()
    row = dt.TimelineRow(3, 1_000, clean, "turn-1")
    encoded = wire.row_appended_event(9, "agent-1", "epoch-1", row)
    decoded = event_pb.Event.FromString(encoded)  # a default client's decoder
    assert decoded.timeline_row_appended.row.seq == 3
    assert sanitize_item(clean) is clean  # sanitizing is idempotent


@settings(max_examples=200)
@given(item=clean_items)
def test_a_clean_item_is_returned_as_the_same_object(item: dt.TimelineItem) -> None:
    assert sanitize_item(item) is item


def test_lone_surrogates_become_the_replacement_character_and_pairs_their_character() -> None:
    assert sanitize_text("a\ud800b") == "a\ufffdb"
    assert sanitize_text("\udc00") == "\ufffd"
    assert sanitize_text("\ud83d\ude00") == "\U0001f600"
    assert sanitize_text("nul\x00 é 😀") == "nul\x00 é 😀"


def test_clean_text_is_returned_as_the_same_object() -> None:
    text = "déjà vu " * 100
    assert sanitize_text(text) is text


def test_a_tool_input_from_json_loads_with_a_lone_surrogate_is_cleaned_keys_too() -> None:
    value = json.loads('{"a": "\\ud800", "\\udfff": ["ok", "\\ud83d"]}')
    call = dt.ToolCall("c1", "t", dt.ToolCallStatus.RUNNING, value)
    clean = sanitize_item(call)
    assert isinstance(clean, dt.ToolCall)
    assert clean.input == {"a": "\ufffd", "\ufffd": ["ok", "\ufffd"]}
    assert clean.call_id == "c1" and clean.status is dt.ToolCallStatus.RUNNING


def test_non_finite_numbers_become_their_protobuf_json_names() -> None:
    value: list[dt.JsonValue] = [math.nan, math.inf, -math.inf, 1.5]
    assert sanitize_json(value) == ["NaN", "Infinity", "-Infinity", 1.5]


def test_values_nested_past_the_limit_become_their_json_text() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = {"k": deep}
    clean: Any = sanitize_json(deep)
    for _ in range(MAX_JSON_DEPTH):
        clean = clean["k"]
    assert clean == '{"k":{"k":{"k":{"k":{"k":"leaf"}}}}}'


def test_a_value_nested_too_deep_even_for_json_text_is_named() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    clean: Any = sanitize_json(deep)
    for _ in range(MAX_JSON_DEPTH):
        clean = clean[0]
    assert clean == "<list nested too deep to show>"


def test_non_json_values_are_shown_as_text() -> None:
    # Not JSON, as a provider's parsed output may be despite its types.
    value: Any = {1: b"\x00", None: {1, 2}, "big": 10**400, "huge": 2**20_000, "t": (1, 2)}
    clean: Any = sanitize_json(value)
    assert clean["1"] == "<bytes: b'\\x00'>"
    assert clean["null"] == "<set: {1, 2}>"
    assert clean["big"] == "1" + "0" * 400  # too big for a double: its decimal text
    assert clean["huge"] == "<int: 20001 bits>"  # too many digits for Python to print
    assert clean["t"] == [1, 2]


def test_text_fields_that_hold_no_string_become_text() -> None:
    item = dt.AssistantMessage(None, 42)  # type: ignore[arg-type]
    assert sanitize_item(item) == dt.AssistantMessage("", "42")


def test_a_row_appended_event_of_a_sanitized_item_matches_protobuf() -> None:
    call = dt.ToolCall("c\ud800", "t", dt.ToolCallStatus.FAILED, {"x": math.nan}, None, "\udfff")
    row = dt.TimelineRow(1, 0, sanitize_item(call))
    event = de.RowAppended("a", "e", row)
    assert convert.encode_event(1, event) == convert.event_to_pb(1, event).SerializeToString()
