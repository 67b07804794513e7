"""The dashboard's search box in a real browser, on a daemon with a state directory and the
search index: hits come with their agent, kind and the snippet's matches marked (as text, never
markup), a hit opens its agent's page, and a malformed query says what the daemon answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.browser.browser import Browser
from tests.browser.conftest import page_daemon
from tests.support.client import SyncStubs, create_request, text

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def indexed(tmp_path: Path) -> Iterator[tuple[str, SyncStubs]]:
    with page_daemon(Config(state_dir=tmp_path / "state", search_index=True)) as served:
        yield served


def agent_saying(stubs: SyncStubs, cwd: str, title: str, reply: str) -> str:
    request = create_request(cwd, title=title, initial_prompt=text(f"/reply {reply}"))
    agent_id = str(stubs.agents.CreateAgent(request, timeout=30).agent.id)
    stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id), timeout=30)
    return agent_id


def test_the_search_box_finds_rows_and_opens_their_agent(
    browser: Browser, indexed: tuple[str, SyncStubs], tmp_path: Path
) -> None:
    url, stubs = indexed
    found = agent_saying(stubs, str(tmp_path), "napper", "the capybara naps <b>soundly</b>")
    agent_saying(stubs, str(tmp_path), "other", "nothing alike here")
    page = browser.page()
    page.goto(url)
    page.wait_for(".agent-item:has-text('napper')")
    page.fill("#search", "capybara")
    page.click("button:has-text('Search')")
    page.wait_for(".search-hit")
    assert page.count(".search-hit") == 2  # the prompt and the reply
    assert page.texts(".search-hit mark") == ["capybara", "capybara"]
    assert all("<b>soundly</b>" in s for s in page.texts(".search-hit .snippet"))  # text
    assert page.count(".search-hit b") == 0
    assert all("napper" in t for t in page.texts(".search-hit .title"))
    assert page.count(f".search-hit[data-agent-id='{found}']") == 2
    page.screenshots("search")
    page.click(".search-hit >> nth=0")
    page.wait_until("(id) => location.hash === `#/agent/${id}`", found)
    page.wait_for(".row:has-text('the capybara naps')")

    page.goto(url)
    page.fill("#search", "capybara AND")
    page.click("button:has-text('Search')")
    page.wait_for("[data-testid=search-status]:has-text('InvalidArgument')")
    assert page.errors() == []
    page.close()
