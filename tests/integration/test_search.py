"""Full-text search through the wire (TimelineService.SearchTimeline), on a daemon with a state
directory: every item kind is findable, the FTS5 syntax works, hits are ranked and paged,
filters narrow them, a malformed query is INVALID_ARGUMENT, a rewind takes its dropped rows'
hits with it, the index survives a restart, and a state directory from before the index is
indexed in the background."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.store import search as search_store
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import DaemonThread


def daemon_on(state_dir: Path) -> DaemonThread:
    return DaemonThread(Config(state_dir=state_dir, search_index=True)).start()


@pytest.fixture
async def durable(tmp_path: Path) -> AsyncIterator[tuple[DaemonThread, Stubs]]:
    daemon = daemon_on(tmp_path / "state")
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield daemon, Stubs.of(channel)
    finally:
        daemon.stop()


async def turn(stubs: Stubs, agent_id: str, *lines: str) -> str:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    events = [e async for e in call]
    return str(events[0].turn_started.turn_id)


async def new_agent(stubs: Stubs, cwd: Path, **kw: Any) -> str:
    return str((await stubs.agents.CreateAgent(create_request(str(cwd), **kw))).agent.id)


async def search(stubs: Stubs, query: str, **kw: Any) -> Any:
    return await stubs.timeline.SearchTimeline(tl_pb.SearchTimelineRequest(query=query, **kw))


def kinds(reply: Any) -> list[str]:
    return [hit.item_kind for hit in reply.hits]


async def test_words_of_every_item_kind_are_found_with_their_row(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path
) -> None:
    _, stubs = durable
    agent = await new_agent(stubs, tmp_path)
    await turn(
        stubs,
        agent,
        "/think pondering quokkas",
        '/tool grepper {"pattern": "walrus"}',
        "/reply a narwhal answers",
        "zebra question",
    )
    await turn(stubs, agent, "/fail kraken trouble")
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent, limit=0))
    by_seq = {row.seq: row for row in page.rows}
    for word, kind in [
        ("zebra", "user_message"),
        ("quokkas", "reasoning"),
        ("grepper", "tool_call"),
        ("walrus", "tool_call"),
        ("narwhal", "assistant_message"),
        ("kraken", "error"),
    ]:
        reply = await search(stubs, word, item_kinds=[kind])
        assert reply.hits, word
        hit = reply.hits[0]
        assert (hit.agent_id, hit.item_kind, hit.cursor.epoch) == (agent, kind, page.epoch)
        assert by_seq[hit.cursor.seq].item.WhichOneof("kind") == kind
        assert f"«{word}»" in hit.snippet
    assert not (await search(stubs, "zebra", item_kinds=["reasoning"])).hits


async def test_phrases_prefixes_not_and_ranking(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path
) -> None:
    _, stubs = durable
    agent = await new_agent(stubs, tmp_path)
    await turn(stubs, agent, "/reply blue whale swims")
    await turn(stubs, agent, "/reply whale blue sky")
    await turn(stubs, agent, "/reply whale whale whale everywhere")
    replies = {"item_kinds": ["assistant_message"]}  # the prompts hold the same words
    phrase = await search(stubs, '"blue whale"', **replies)
    assert [h.snippet for h in phrase.hits] == ["«blue whale» swims"]
    prefix = await search(stubs, "every*", **replies)
    assert [h.snippet for h in prefix.hits] == ["whale whale whale «everywhere»"]
    negated = await search(stubs, "whale NOT blue", **replies)
    assert [h.snippet for h in negated.hits] == ["«whale» «whale» «whale» everywhere"]
    near = await search(stubs, "NEAR(blue swims, 2) OR text:sky", **replies)
    assert {h.snippet for h in near.hits} == {"«blue» whale «swims»", "whale blue «sky»"}
    both = await search(stubs, "blue AND sky OR everywhere", **replies)
    assert len(both.hits) == 2
    # bm25: the row where "whale" is densest ranks first; scores ascend (lower = better).
    ranked = await search(stubs, "whale", item_kinds=["assistant_message"])
    assert ranked.hits[0].snippet.startswith("«whale» «whale» «whale»")
    scores = [h.score for h in ranked.hits]
    assert scores == sorted(scores) and len(scores) == 3


async def test_pages_and_filters(durable: tuple[DaemonThread, Stubs], tmp_path: Path) -> None:
    daemon, stubs = durable
    first = await new_agent(stubs, tmp_path, labels={"team": "red"})
    second = await new_agent(stubs, tmp_path, labels={"team": "blue"})
    for i in range(5):
        await turn(stubs, first, f"/reply otter number{i}")
    daemon.advance(60_000)
    await turn(stubs, second, "/reply otter late")
    late_ms = daemon.clock.now_ms()
    seen: list[tuple[str, int]] = []
    token = ""
    while True:
        page = await search(stubs, "otter", page_size=2, page_token=token)
        seen += [(h.agent_id, h.cursor.seq) for h in page.hits]
        assert len(page.hits) <= 2
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) == 12  # each prompt and its reply
    assert {a for a, _ in seen} == {first, second}
    red = await search(stubs, "otter", label_selector="team=red")
    assert {h.agent_id for h in red.hits} == {first} and len(red.hits) == 10
    assert {h.agent_id for h in (await search(stubs, "otter", agent_ids=[second])).hits} == {second}
    assert not (await search(stubs, "otter", providers=["claude-code"])).hits
    assert len((await search(stubs, "otter", providers=["scripted"])).hits) == 12
    since = Timestamp(seconds=(late_ms - 1000) // 1000)
    recent = await search(stubs, "otter", start_time=since)
    assert {h.agent_id for h in recent.hits} == {second}
    older = await search(stubs, "otter", end_time=since)
    assert {h.agent_id for h in older.hits} == {first}
    # Archived agents are searched only when asked.
    await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id=second))
    assert {h.agent_id for h in (await search(stubs, "otter")).hits} == {first}
    everyone = await search(stubs, "otter", include_archived=True)
    assert {h.agent_id for h in everyone.hits} == {first, second}


async def test_many_matches_are_ranked_a_window_at_a_time_newest_first(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, stubs = durable
    monkeypatch.setattr(search_store, "WINDOW", 4)
    older = await new_agent(stubs, tmp_path)
    for words in ("kiwi kiwi kiwi kiwi kiwi", "kiwi one", "kiwi kiwi kiwi kiwi"):
        await turn(stubs, older, f"/reply {words}")
    newer = await new_agent(stubs, tmp_path)
    for words in ("kiwi two", "kiwi three", "kiwi four"):
        await turn(stubs, newer, f"/reply {words}")
    replies = {"item_kinds": ["assistant_message"]}
    first = await search(stubs, "kiwi", page_size=3, **replies)
    second = await search(stubs, "kiwi", page_size=3, page_token=first.next_page_token, **replies)
    assert first.next_page_token and not second.next_page_token
    hits = [*first.hits, *second.hits]
    # The newest 4 matches (newer's three and older's last) rank first, by score among them:
    # older's last reply is the densest there; older's first, denser still, is in the next.
    assert hits[0].snippet == "«kiwi» «kiwi» «kiwi» «kiwi»"
    assert {h.agent_id for h in hits[:4]} == {older, newer}
    assert hits[4].snippet == "«kiwi» «kiwi» «kiwi» «kiwi» «kiwi»"
    assert {h.agent_id for h in hits[4:]} == {older}
    for window in (hits[:4], hits[4:]):
        assert [h.score for h in window] == sorted(h.score for h in window)
    assert len({(h.agent_id, h.cursor.seq) for h in hits}) == 6


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"query": "otter AND"}, "query"),
        ({"query": '"unclosed'}, "query"),
        ({"query": "nosuchcolumn:otter"}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "otter", "item_kinds": ["sticker"]}, "item_kinds[0]"),
        ({"query": "otter", "page_size": 1000}, "page_size"),
        ({"query": "otter", "page_token": "bm90IGEgdG9rZW4"}, "page_token"),
    ],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(
    durable: tuple[DaemonThread, Stubs], request_fields: dict[str, Any], field: str
) -> None:
    _, stubs = durable
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stubs.timeline.SearchTimeline(tl_pb.SearchTimelineRequest(**request_fields))
    details = error_details(caught.value)
    assert details.code is grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == (field,)


async def test_a_token_of_another_query_and_an_unknown_agent_are_refused(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path
) -> None:
    _, stubs = durable
    agent = await new_agent(stubs, tmp_path)
    for i in range(3):
        await turn(stubs, agent, f"/reply heron {i}")
    token = (await search(stubs, "heron", page_size=1)).next_page_token
    assert token
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await search(stubs, "egret", page_token=token)
    assert error_details(caught.value).fields == ("page_token",)
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await search(stubs, "heron", agent_ids=["f" * 32])
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


async def test_a_rewind_takes_the_dropped_rows_hits_with_it(
    durable: tuple[DaemonThread, Stubs], tmp_path: Path
) -> None:
    _, stubs = durable
    agent = await new_agent(stubs, tmp_path)
    await turn(stubs, agent, "/echo", "/reply kept lemur")
    second = await turn(stubs, agent, "/echo", "/reply dropped mongoose")
    assert (await search(stubs, "mongoose")).hits
    reply = await stubs.turns.Rewind(
        turn_pb.RewindRequest(agent_id=agent, message_id=f"{second}-user")
    )
    assert not (await search(stubs, "mongoose")).hits
    kept = await search(stubs, "lemur")
    assert {h.cursor.epoch for h in kept.hits} == {reply.agent.timeline.epoch}


async def test_the_index_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent = await new_agent(stubs, tmp_path)
            await turn(stubs, agent, "/reply persistent pangolin")
    finally:
        first.stop()
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            reply = await search(Stubs.of(channel), "pangolin")
            assert {h.agent_id for h in reply.hits} == {agent} and not reply.indexing
    finally:
        second.stop()


async def test_a_state_directory_from_before_search_is_indexed_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent = await new_agent(stubs, tmp_path)
            for i in range(4):
                await turn(stubs, agent, f"/reply ancient ibis {i}")
    finally:
        first.stop()
    # as a version 4 daemon left it
    with closing(sqlite3.connect(state / "corral.db")) as conn, conn:
        conn.execute("DROP TABLE timeline_text")
        conn.execute("DELETE FROM meta WHERE key = 'search_backfill'")
        conn.execute("DROP TABLE turn_usage")  # a version 4 daemon had no usage ledger
        conn.execute("PRAGMA user_version = 4")
    conn.close()
    monkeypatch.setattr(search_store, "BACKFILL_BATCH", 3)
    caplog.set_level(logging.INFO, logger="corral_server.store.search")
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            await turn(stubs, agent, "/reply fresh ibis")  # indexed at append, not twice
            reply = await search(stubs, "ibis", page_size=100)
            deadline = time.monotonic() + 20
            while reply.indexing and time.monotonic() < deadline:
                reply = await search(stubs, "ibis", page_size=100)
            assert not reply.indexing
            assert len(reply.hits) == 10  # five prompts and their replies, each once
            assert len({h.cursor.seq for h in reply.hits}) == 10
    finally:
        second.stop()
    logged = caplog.text
    assert "search index: indexing" in logged and "looked at" in logged
    assert "search index: done" in logged


async def test_an_in_memory_daemon_answers_unimplemented_naming_the_state_dir(
    aio_channel: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await Stubs.of(aio_channel).timeline.SearchTimeline(
            tl_pb.SearchTimelineRequest(query="anything")
        )
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "--state-dir" in (caught.value.details() or "")
