"""The full-text index is on by default (`corral serve --no-search-index` turns it off;
`--search-index` is still accepted): with it off a daemon indexes nothing and SearchTimeline
answers FAILED_PRECONDITION / SEARCH_INDEX_OFF naming the flag (the CLI prints it, exit 2);
rows written while it was off are found once a later start turns it on, after the background
indexing, and the rows indexed before are not indexed twice."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from corral_cli.main import main
from corral_server.app import Config
from corral_server.serve_flags import build_parser
from corral_server.store import search as search_store
from tests.integration.test_search import new_agent, search, turn
from tests.support.client import Stubs, error_details
from tests.support.daemon import DaemonProcess, DaemonThread


def daemon_on(state: Path, *, index: bool) -> DaemonThread:
    return DaemonThread(Config(state_dir=state, search_index=index)).start()


def index_rows(state: Path) -> int:
    with closing(sqlite3.connect(state / "corral.db")) as conn, conn:
        count = int(conn.execute("SELECT count(*) FROM timeline_text").fetchone()[0])
    conn.close()
    return count


async def test_off_indexes_nothing_and_search_names_the_flag(tmp_path: Path) -> None:
    state = tmp_path / "state"
    daemon = daemon_on(state, index=False)
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            agent = await new_agent(stubs, tmp_path)
            await turn(stubs, agent, "/reply an unindexed okapi")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await search(stubs, "okapi")
    finally:
        daemon.stop()  # drains: every row is committed
    details = error_details(caught.value)
    assert details.code is grpc.StatusCode.FAILED_PRECONDITION
    assert details.reason == "SEARCH_INDEX_OFF"
    assert "--no-search-index" in details.message
    assert index_rows(state) == 0


async def test_rows_written_while_off_are_found_once_it_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setattr(search_store, "BACKFILL_BATCH", 3)  # several batches
    first = daemon_on(state, index=True)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            old = await new_agent(stubs, tmp_path)
            await turn(stubs, old, "/reply early heron")  # indexed at append
    finally:
        first.stop()
    indexed_before = index_rows(state)
    second = daemon_on(state, index=False)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            for i in range(3):
                await turn(stubs, old, f"/reply later heron {i}")
            new = await new_agent(stubs, tmp_path)
            await turn(stubs, new, "/reply newcomer heron")
    finally:
        second.stop()
    assert index_rows(state) == indexed_before
    third = daemon_on(state, index=True)
    try:
        async with grpc.aio.insecure_channel(third.address) as channel:
            stubs = Stubs.of(channel)
            reply = await search(stubs, "heron", page_size=100)
            deadline = time.monotonic() + 20
            while reply.indexing and time.monotonic() < deadline:
                reply = await search(stubs, "heron", page_size=100)
            assert not reply.indexing
    finally:
        third.stop()
    found = [(hit.agent_id, hit.cursor.seq) for hit in reply.hits]
    assert len(found) == len(set(found)) == 10  # five prompts and their replies, each once
    assert {agent for agent, _ in found} == {old, new}
    assert index_rows(state) == 10


def test_corral_serve_no_search_index_and_the_cli_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = DaemonProcess(tmp_path / "state", "--no-search-index", "--web-listen", "off").start()
    try:
        assert main(["--addr", daemon.address, "run", "--cwd", str(tmp_path), "/reply tapir"]) == 0
        capsys.readouterr()
        assert main(["--addr", daemon.address, "search", "tapir"]) == 2
    finally:
        daemon.stop()
    err = capsys.readouterr().err
    assert "error: FAILED_PRECONDITION: search needs the full-text index" in err
    assert "--no-search-index" in err
    assert index_rows(tmp_path / "state") == 0


def test_the_flags_default_on_and_search_index_is_still_accepted() -> None:
    parser = build_parser()
    assert Config().search_index
    assert parser.parse_args([]).search_index
    assert parser.parse_args(["--search-index"]).search_index
    assert not parser.parse_args(["--no-search-index"]).search_index


def test_corral_serve_indexes_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = DaemonProcess(tmp_path / "state", "--web-listen", "off").start()
    try:
        assert main(["--addr", daemon.address, "run", "--cwd", str(tmp_path), "/reply tapir"]) == 0
        capsys.readouterr()
        assert main(["--addr", daemon.address, "--json", "search", "tapir"]) == 0
    finally:
        daemon.stop()
    assert '"item_kind": "assistant_message"' in capsys.readouterr().out


async def test_a_page_says_indexing_when_the_indexing_ended_while_its_query_ran(
    tmp_path: Path,
) -> None:
    # The flag is read before the query: a page that may miss the last rows indexed says so.
    served = daemon_on(tmp_path / "state", index=True)
    try:
        assert served.daemon is not None and served.daemon.search is not None
        index = served.daemon.search
        asked = index.search

        async def search_while_the_indexing_ends(query: search_store.SearchQuery) -> object:
            index.backfill.running = False  # it finishes while the query runs
            return await asked(query)

        served.run(index.backfill.stop())  # no indexing of its own left to end meanwhile
        index.backfill.running = True
        index.search = search_while_the_indexing_ends  # type: ignore[assignment,method-assign]
        async with grpc.aio.insecure_channel(served.address) as channel:
            stubs = Stubs.of(channel)
            assert (await search(stubs, "anything")).indexing
            assert not (await search(stubs, "anything")).indexing
    finally:
        served.stop()
