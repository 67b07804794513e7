"""A JSON value as a google.protobuf.Value (rpc/items.py `json_value`): the fast path through
the well-known types' setters builds exactly what json_format.ParseDict builds, for hostile
values too, and falls back to the value's JSON text exactly where ParseDict fails."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, struct_pb2
from hypothesis import given, settings

from corral_server.rpc.items import json_value
from tests.support.items import hostile_json, json_values


def parse_dict(value: Any) -> struct_pb2.Value | None:
    """ParseDict's Value, or None where it fails."""
    out = struct_pb2.Value()
    try:
        json_format.ParseDict(value, out)
    except (json_format.ParseError, RecursionError, ValueError, TypeError, OverflowError):
        return None
    return out


@given(json_values)
def test_a_json_value_is_what_parse_dict_makes(value: Any) -> None:
    assert json_value(value) == parse_dict(value)


@settings(max_examples=300)
@given(hostile_json)
def test_a_hostile_value_is_parse_dicts_or_travels_as_text_where_parse_dict_fails(
    value: Any,
) -> None:
    expected = parse_dict(value)
    got = json_value(value)
    if expected is not None:
        assert got == expected
    else:
        assert got.WhichOneof("kind") == "string_value"
        try:
            assert got.string_value == json.dumps(value)
        except (RecursionError, ValueError, TypeError):
            assert got.string_value.startswith("<JSON value")


def test_empty_objects_and_arrays_stay_objects_and_arrays() -> None:
    assert json_value({}).WhichOneof("kind") == "struct_value"
    assert json_value([]).WhichOneof("kind") == "list_value"
    assert json_value({"a": [], "b": {}}) == parse_dict({"a": [], "b": {}})
