"""The web edge's codecs and framing against protobuf's own encoders: a batch printed event by
event (with the printed-event cache) is the JSON of the whole message, binary passes bytes
through, and envelopes, percent-encoding and the end of a stream are what the specs say."""

from __future__ import annotations

import json
import struct

import grpc
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as tl_pb
from corral_server.web import framing
from corral_server.web.codecs import JSON, PROTO, EventJson

texts = st.text(max_size=200)


@st.composite
def events(draw: st.DrawFn) -> event_pb.Event:
    event = event_pb.Event(revision=draw(st.integers(0, 2**60)))
    match draw(st.sampled_from(["row", "synced", "ending"])):
        case "row":
            appended = event.timeline_row_appended
            appended.agent_id, appended.epoch = draw(texts), draw(texts)
            appended.row.seq = draw(st.integers(0, 2**40))
            appended.row.item.CopyFrom(
                tl_pb.TimelineItem(assistant_message=tl_pb.AssistantMessage(text=draw(texts)))
            )
        case "synced":
            event.synced.incarnation = draw(texts)
        case "ending":
            event.stream_ending.resume_revision = draw(st.integers(0, 2**50))
            event.stream_ending.reason = draw(texts)
    return event


@given(st.lists(events(), max_size=30))
def test_a_batch_printed_event_by_event_is_the_json_of_the_whole_message(
    batch: list[event_pb.Event],
) -> None:
    message = event_pb.SubscribeResponse(events=batch)
    data = message.SerializeToString()
    printed = JSON.encode(data, event_pb.SubscribeResponse)
    assert json.loads(printed) == json_format.MessageToDict(message)
    assert JSON.encode(data, event_pb.SubscribeResponse) == printed  # again, from the cache


def test_bytes_that_are_not_a_batch_are_printed_whole() -> None:
    printer = EventJson(event_pb.Event)
    assert printer.batch(b"\x12\x00") is None  # another field
    assert printer.batch(b"\x0a\x05ab") is None  # a frame longer than the rest


def test_the_printed_event_cache_is_bounded() -> None:
    printer = EventJson(event_pb.Event, entries=4)
    for revision in range(10):
        frame = event_pb.Event(revision=revision + 1).SerializeToString()
        printer.batch(b"\x0a" + bytes([len(frame)]) + frame)
    assert len(printer._printed) == 4
    by_bytes = EventJson(event_pb.Event, max_bytes=100)
    for revision in range(10):
        frame = event_pb.Event(revision=revision + 1).SerializeToString()
        by_bytes.batch(b"\x0a" + bytes([len(frame)]) + frame)
    assert sum(len(f) + len(t) for f, t in by_bytes._printed.items()) <= 100


def test_binary_passes_pre_encoded_bytes_through() -> None:
    data = b"\x0a\x02\x08\x01"
    assert PROTO.encode(data, event_pb.SubscribeResponse) is data


def test_an_envelope_is_flags_then_a_big_endian_length() -> None:
    assert framing.envelope(0x02, b"{}") == b"\x02\x00\x00\x00\x02{}"
    assert framing.single_envelope(struct.pack(">BI", 0, 3) + b"abc") == b"abc"


@pytest.mark.parametrize(
    "body", [b"", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x02a", b"\x80\x00\x00\x00\x00"]
)
def test_a_body_that_is_not_one_envelope_is_refused(body: bytes) -> None:
    with pytest.raises(framing.EnvelopeError):
        framing.single_envelope(body)


def test_grpc_message_is_percent_encoded_utf8() -> None:
    assert framing.percent_encode("100% é\n") == "100%25 %C3%A9%0A"


def test_the_trailers_frame_carries_status_message_and_details() -> None:
    frame = framing.grpc_web_trailers(grpc.StatusCode.NOT_FOUND, "no: x", b"\x01\x02")
    flags, length = struct.unpack(">BI", frame[:5])
    assert flags == 0x80 and length == len(frame) - 5
    lines = frame[5:].decode().split("\r\n")
    assert lines == ["grpc-status:5", "grpc-message:no: x", "grpc-status-details-bin:AQI", ""]
