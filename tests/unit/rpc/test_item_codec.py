"""rpc/item_codec.py: the stored bytes of an item are its wire bytes, and decode them back."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_server.domain import timeline as dt
from corral_server.rpc import convert
from corral_server.rpc.item_codec import ITEM_CODEC
from tests.unit.rpc.test_convert import items, texts

# JSON whose numbers are ints a double holds exactly, or floats that are not integral: what a
# tool reports; each must come back as the same JSON text.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer())
    | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300)
@given(items)
def test_every_item_survives_the_codec(item: dt.TimelineItem) -> None:
    data = ITEM_CODEC.encode(item)
    assert data == convert.item_to_pb(item).SerializeToString()  # the wire's bytes
    assert ITEM_CODEC.decode(data) == item


@given(json_values)
def test_json_numbers_come_back_as_the_same_json_text(value: dt.JsonValue) -> None:
    call = dt.ToolCall("c", "n", dt.ToolCallStatus.RUNNING, input=value, output=[value])
    back = ITEM_CODEC.decode(ITEM_CODEC.encode(call))
    assert isinstance(back, dt.ToolCall)
    assert json.dumps(back.input, sort_keys=True) == json.dumps(value, sort_keys=True)
    assert json.dumps(back.output, sort_keys=True) == json.dumps([value], sort_keys=True)


def test_integral_numbers_are_ints_again_and_others_stay_floats() -> None:
    call = dt.ToolCall("c", "n", dt.ToolCallStatus.COMPLETED, {"n": 1, "x": 1.5, "big": 2**60})
    back = ITEM_CODEC.decode(ITEM_CODEC.encode(call))
    assert isinstance(back, dt.ToolCall) and isinstance(back.input, dict)
    assert type(back.input["n"]) is int and type(back.input["x"]) is float
    assert type(back.input["big"]) is float  # beyond 2**53: a double, as on the wire
