"""Every answer fits a default client (4 MiB), through the wire: pages of rows near the row
limit, `limit: 0` over a long timeline, a huge activity budget."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.domain.timeline import MAX_ROW_BYTES
from corral_server.timeline.activity import MAX_ACTIVITY_CHARS
from tests.support.client import Stubs, SyncStubs, create_request, text
from tests.support.daemon import DaemonThread

TAIL, BEFORE, AFTER = (
    tl_pb.TIMELINE_DIRECTION_TAIL,
    tl_pb.TIMELINE_DIRECTION_BEFORE,
    tl_pb.TIMELINE_DIRECTION_AFTER,
)
DEFAULT_CLIENT_LIMIT = 4 * 1024 * 1024
EMOJI = "\U0001f600"
BIG_REPLY = "/reply " + EMOJI * 475_000  # 1.9 MB: a user row and a reply row of ~1.9 MB each


@pytest.fixture(scope="module")
def big_agent(grpc_server: DaemonThread, tmp_path_factory: Any) -> Iterator[tuple[SyncStubs, str]]:
    """An agent whose timeline holds three turns of two ~1.9 MB rows each (~11 MB)."""
    with grpc.insecure_channel(grpc_server.address) as channel:  # a default client
        stubs = Stubs.of(channel)
        cwd = str(tmp_path_factory.mktemp("big"))
        agent_id = stubs.agents.CreateAgent(create_request(cwd)).agent.id
        for _ in range(3):
            request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(BIG_REPLY))
            assert list(stubs.turns.StreamTurn(request))[-1].WhichOneof("event") == (
                "turn_completed"
            )
        yield stubs, agent_id


def fetch(
    stubs: SyncStubs,
    agent_id: str,
    direction: tl_pb.TimelineDirection.ValueType,
    cursor: Any = None,
    **kw: Any,
) -> tl_pb.FetchTimelineResponse:
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, direction=direction, **kw)
    if cursor is not None:
        request.cursor.CopyFrom(cursor)
    return stubs.timeline.FetchTimeline(request)


def seqs(page: Any) -> list[int]:
    return [row.seq for row in page.rows]


def test_two_big_rows_come_one_page_each_and_the_receipt_leads_on(
    big_agent: tuple[SyncStubs, str],
) -> None:
    stubs, agent_id = big_agent
    tail = fetch(stubs, agent_id, TAIL)  # limit unset: 200 rows asked for
    assert seqs(tail) == [6] and tail.has_older and not tail.has_newer
    assert tail.rows[0].item.assistant_message.text == EMOJI * 475_000
    before = fetch(stubs, agent_id, BEFORE, tail.start_cursor)
    assert seqs(before) == [5] and before.has_older and before.has_newer
    assert before.rows[0].item.user_message.text == BIG_REPLY
    assert (tail.window.min_seq, tail.window.max_seq) == (1, 6)


@pytest.mark.parametrize("direction", [TAIL, AFTER])
def test_limit_zero_over_a_long_timeline_pages_on_to_the_end(
    big_agent: tuple[SyncStubs, str], direction: int
) -> None:
    stubs, agent_id = big_agent
    if direction == TAIL:
        page = fetch(stubs, agent_id, TAIL, limit=0)
        seen, pages = seqs(page), [page]
        while page.has_older:
            page = fetch(stubs, agent_id, BEFORE, page.start_cursor, limit=0)
            seen, pages = seqs(page) + seen, [*pages, page]
    else:
        first = fetch(stubs, agent_id, TAIL, limit=1)
        start = tl_pb.FetchTimelineRequest().cursor.__class__(epoch=first.epoch, seq=0)
        page = fetch(stubs, agent_id, AFTER, start, limit=0)
        seen, pages = seqs(page), [page]
        while page.has_newer:
            page = fetch(stubs, agent_id, AFTER, page.end_cursor, limit=0)
            seen, pages = seen + seqs(page), [*pages, page]
    assert seen == [1, 2, 3, 4, 5, 6]
    assert all(page.ByteSize() <= MAX_ROW_BYTES + 1024 for page in pages)


def test_activity_with_a_huge_budget_answers_at_most_the_cap(
    big_agent: tuple[SyncStubs, str],
) -> None:
    stubs, agent_id = big_agent
    request = tl_pb.GetActivityRequest(agent_id=agent_id, max_chars=4_000_000)
    digest = stubs.timeline.GetActivity(request)
    assert 0 < len(digest.text) <= MAX_ACTIVITY_CHARS
    assert digest.truncated
    assert digest.ByteSize() < DEFAULT_CLIENT_LIMIT
