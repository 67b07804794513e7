"""TimelineService through the wire: page receipts, cursors across epochs, gaps, activity."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import timeline_pb2
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_server.app import Config
from tests.support.client import Stubs, SyncStubs, create_request, text
from tests.support.daemon import DaemonThread

TAIL, BEFORE, AFTER = (
    tl_pb.TIMELINE_DIRECTION_TAIL,
    tl_pb.TIMELINE_DIRECTION_BEFORE,
    tl_pb.TIMELINE_DIRECTION_AFTER,
)
THOUGHTS = 30  # one user row + 30 reasoning rows + one assistant row = 32 rows


@pytest.fixture(scope="module")
def small_daemon() -> Iterator[DaemonThread]:
    """A daemon that keeps only 10 rows per timeline, to reach `gap`."""
    daemon = DaemonThread(Config(timeline_retain_rows=10)).start()
    yield daemon
    daemon.stop()


def run_turn(stubs: SyncStubs, cwd: Any) -> str:
    agent_id = stubs.agents.CreateAgent(create_request(str(cwd))).agent.id
    script = [f"/think thought {i}" for i in range(1, THOUGHTS + 1)] + ["/reply done"]
    call = stubs.turns.StreamTurn(_stream_request(agent_id, script))
    assert list(call)[-1].WhichOneof("event") == "turn_completed"
    return agent_id


def _stream_request(agent_id: str, lines: list[str]) -> Any:
    from corral.v1 import turn_service_pb2 as turn_pb

    return turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))


def fetch(
    stubs: SyncStubs,
    agent_id: str,
    direction: tl_pb.TimelineDirection.ValueType = TAIL,
    cursor: Any = None,
    **kw: Any,
) -> tl_pb.FetchTimelineResponse:
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, direction=direction, **kw)
    if cursor is not None:
        request.cursor.CopyFrom(cursor)
    return stubs.timeline.FetchTimeline(request)


def seqs(page: Any) -> list[int]:
    return [r.seq for r in page.rows]


def test_tail_page_names_its_window_and_cursors(grpc_channel: Any, tmp_path: Any) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = run_turn(stubs, tmp_path)
    page = fetch(stubs, agent_id, limit=5)
    assert seqs(page) == [28, 29, 30, 31, 32]
    assert (page.window.min_seq, page.window.max_seq, page.window.next_seq) == (1, 32, 33)
    assert page.has_older and not page.has_newer
    assert not (page.reset or page.stale_cursor or page.gap)
    assert page.start_cursor == timeline_pb2.Cursor(epoch=page.epoch, seq=28)
    assert page.end_cursor == timeline_pb2.Cursor(epoch=page.epoch, seq=32)
    assert page.rows[-1].item.assistant_message.text == "done"


def test_before_pages_walk_back_to_the_first_row_without_overlap(
    grpc_channel: Any, tmp_path: Any
) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = run_turn(stubs, tmp_path)
    page = fetch(stubs, agent_id, limit=7)
    seen = seqs(page)
    while page.has_older:
        page = fetch(stubs, agent_id, BEFORE, page.start_cursor, limit=7)
        seen = seqs(page) + seen
    assert seen == list(range(1, 33))
    assert page.rows[0].item.user_message.text.startswith("/think thought 1")


def test_after_pages_walk_forward_to_the_head(grpc_channel: Any, tmp_path: Any) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = run_turn(stubs, tmp_path)
    epoch = fetch(stubs, agent_id, limit=1).epoch
    cursor = timeline_pb2.Cursor(epoch=epoch, seq=0)
    seen: list[int] = []
    while True:
        page = fetch(stubs, agent_id, AFTER, cursor, limit=10)
        seen += seqs(page)
        if not page.has_newer:
            break
        cursor = page.end_cursor
    assert seen == list(range(1, 33))


def test_unset_limit_is_200_and_zero_is_everything(grpc_channel: Any, tmp_path: Any) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = run_turn(stubs, tmp_path)
    assert len(fetch(stubs, agent_id).rows) == 32  # fewer than 200
    assert len(fetch(stubs, agent_id, limit=0).rows) == 32
    assert len(fetch(stubs, agent_id, limit=3).rows) == 3


def test_a_cursor_from_another_epoch_is_stale_and_resets_to_the_tail(
    grpc_channel: Any, tmp_path: Any
) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = run_turn(stubs, tmp_path)
    foreign = timeline_pb2.Cursor(epoch="not-this-epoch", seq=3)
    page = fetch(stubs, agent_id, AFTER, foreign, limit=4)
    assert page.stale_cursor and page.reset and not page.gap
    assert seqs(page) == [29, 30, 31, 32]


def test_an_after_cursor_older_than_retained_history_is_a_gap(
    small_daemon: DaemonThread, tmp_path: Any
) -> None:
    with grpc.insecure_channel(small_daemon.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = run_turn(stubs, tmp_path)
        tail = fetch(stubs, agent_id, limit=0)
        assert (tail.window.min_seq, tail.window.max_seq) == (23, 32)
        old = timeline_pb2.Cursor(epoch=tail.epoch, seq=5)
        page = fetch(stubs, agent_id, AFTER, old, limit=3)
        assert page.gap and page.reset and not page.stale_cursor
        assert seqs(page) == [30, 31, 32]
        # One row before the retained window is still contiguous: no gap.
        edge = fetch(stubs, agent_id, AFTER, timeline_pb2.Cursor(epoch=tail.epoch, seq=22), limit=3)
        assert not edge.gap and seqs(edge) == [23, 24, 25]


def test_activity_digest_covers_the_newest_rows_within_the_budget(
    grpc_channel: Any, tmp_path: Any
) -> None:
    stubs = Stubs.of(grpc_channel)
    agent_id = run_turn(stubs, tmp_path)
    full = stubs.timeline.GetActivity(tl_pb.GetActivityRequest(agent_id=agent_id))
    assert "thought 1" in full.text and "done" in full.text and not full.truncated
    assert (full.start_cursor.seq, full.end_cursor.seq) == (1, 32)
    small = stubs.timeline.GetActivity(tl_pb.GetActivityRequest(agent_id=agent_id, max_chars=60))
    assert small.truncated and len(small.text) <= 60
    assert "done" in small.text and "thought 1\n" not in small.text
