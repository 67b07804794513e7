"""timeline/size.py: every estimate is an upper bound of the real protobuf encoding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.v1 import timeline_service_pb2 as tl_pb
from corral_server.domain import timeline as dt
from corral_server.rpc import convert
from corral_server.timeline.size import item_bytes, row_bytes, text_bytes
from tests.support.items import clean_items, texts

rows = st.builds(
    dt.TimelineRow,
    seq=st.integers(0, 2**63),
    timestamp_ms=st.integers(0, 2**50),
    item=clean_items,
    turn_id=texts,
    provider_message_id=texts,
)


def encoded_in_a_page(row: dt.TimelineRow) -> int:
    """What one row adds to a FetchTimelineResponse."""
    return len(tl_pb.FetchTimelineResponse(rows=[convert.row_to_pb(row)]).SerializeToString())


@settings(max_examples=300)
@given(row=rows)
def test_a_row_estimate_is_never_below_its_encoded_size(row: dt.TimelineRow) -> None:
    assert row_bytes(row) >= encoded_in_a_page(row)
    assert item_bytes(row.item) >= len(convert.item_to_pb(row.item).SerializeToString())


def test_the_estimate_of_a_long_text_row_is_close_to_its_encoded_size() -> None:
    row = dt.TimelineRow(7, 1_700_000_000_123, dt.AssistantMessage("é" * 1_000_000, "m1"), "t1")
    assert 0 <= row_bytes(row) - encoded_in_a_page(row) < 100


def test_a_json_number_is_measured_as_protobuf_encodes_it_not_as_its_text() -> None:
    call = dt.ToolCall("c", "t", dt.ToolCallStatus.COMPLETED, output=[0] * 10_000)
    encoded = len(convert.item_to_pb(call).SerializeToString())
    assert encoded > 100_000  # 11 bytes a number, though "0," is 2 characters of JSON
    assert item_bytes(call) >= encoded


def test_text_bytes_counts_utf8_and_a_lone_surrogate_as_its_replacement() -> None:
    assert text_bytes("abc") == 3
    assert text_bytes("é😀") == 6
    assert text_bytes("\ud800") == len("\ufffd".encode())
