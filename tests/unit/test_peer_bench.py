"""The offline pieces of the peer bench (bench/peer.py), which itself needs opencode and is not
part of the suite: the chunked-body decoder and event-stream parser its opencode watchers read
with, what a watcher makes of opencode's events, and the CPU accounting from /proc."""

from __future__ import annotations

import json
import os

from bench import peer_procs
from bench.peer_opencode import OpencodeView
from bench.peer_sse import ChunkedDecoder, SseParser
from bench.peer_turns import reply_prompt
from tests.support.fake_models import script


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_chunked_bodies_decode_whatever_the_split() -> None:
    body = chunked(b"data: one\n\n", b"data: t", b"wo\n\n")
    for step in (1, 2, 3, 7, len(body)):
        decoder = ChunkedDecoder()
        out = b"".join(decoder.feed(body[i : i + step]) for i in range(0, len(body), step))
        assert out == b"data: one\n\ndata: two\n\n"
        assert decoder.done


def test_chunk_extensions_are_ignored_and_the_end_chunk_ends_the_body() -> None:
    decoder = ChunkedDecoder()
    assert decoder.feed(b"4;name=x\r\nabcd\r\n0\r\n\r\n") == b"abcd"
    assert decoder.done


def test_events_are_cut_at_blank_lines_with_their_fields() -> None:
    parser = SseParser()
    stream = b'id: 7\nevent: message\ndata: {"a":\ndata: 1}\n\n: a comment\n\ndata: x\r\n\r\n'
    events = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    assert [(e.id, e.name, e.data) for e in events] == [
        ("7", "message", '{"a":\n1}'),
        ("", "", "x"),
    ]
    assert events[0].json() == {"a": 1}


def event(kind: str, **properties: object) -> bytes:
    payload = {"id": f"evt_{kind}", "type": kind, "properties": properties}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def test_a_view_keeps_its_sessions_deltas_and_the_reply_text() -> None:
    view = OpencodeView("ses_a")
    part = {"sessionID": "ses_a", "messageID": "msg_2", "type": "text", "text": "hi there"}
    user_part = {"sessionID": "ses_a", "messageID": "msg_1", "type": "text", "text": "prompt"}
    stream = [
        event("server.connected"),
        event("message.updated", sessionID="ses_a", info={"id": "msg_2", "role": "assistant"}),
        event("message.part.delta", sessionID="ses_a", field="text", delta="hi "),
        event("message.part.delta", sessionID="ses_b", field="text", delta="other session"),
        event("message.part.delta", sessionID="ses_a", field="text", delta="there"),
        event("message.part.updated", sessionID="ses_a", part=part),
        event("message.part.updated", sessionID="ses_a", part=user_part),
        event("session.idle", sessionID="ses_a"),
    ]
    for e in SseParser().feed(b"".join(stream)):
        view.take(e)
    assert view.text == "hi there"
    assert view.final_text == "hi there"  # the user's own text part is not the reply
    assert len(view.chunks) == 2
    assert view.idle
    assert view.last_id == "evt_session.idle"


def test_the_reply_prompt_asks_the_fake_for_exactly_that_many_deltas() -> None:
    for deltas in (1, 3, 10, 30, 100):
        prompt, reply, count = reply_prompt(deltas)
        markers = script.parse(prompt)
        chunks = script.chunks(markers.reply or "", markers.slow_s)
        assert count == deltas == len(chunks)
        assert reply == "".join(chunks)


def test_cpu_readings_count_this_process_and_take_stat_when_threads_ended() -> None:
    stat = "1234 (a name (with) spaces) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0"
    assert peer_procs.stat_ns(stat) == 300 * peer_procs.TICK_NS
    before = peer_procs.cpu_reading(os.getpid())
    sum(i * i for i in range(200_000))  # some CPU for the readings to see
    after = peer_procs.cpu_reading(os.getpid())
    assert peer_procs.cpu_used_ns(before, after) > 0
    tick = peer_procs.TICK_NS
    fine = peer_procs.CpuReading(5 * tick, 0), peer_procs.CpuReading(6 * tick, 10 * tick)
    assert peer_procs.cpu_used_ns(*fine) == 10 * tick  # a thread's time left with it
    close = peer_procs.CpuReading(5 * tick, 0), peer_procs.CpuReading(6 * tick, 2 * tick)
    assert peer_procs.cpu_used_ns(*close) == tick  # within the ticks' rounding: the fine one
