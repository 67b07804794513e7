""" "Fork from here" on a user message, in a real browser: the page asks ForkAgent for a new
agent of the rows before that message and opens it, whose timeline is those rows; a read-only
page offers no fork."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.browser.browser import Browser
from tests.browser.conftest import Web
from tests.browser.pages import daemon_rows, wait_rows_equal
from tests.browser.test_dashboard import open_agent
from tests.support.client import create_request, text

pytestmark = pytest.mark.timeout(120)


def test_fork_from_here_opens_a_new_agent_of_the_rows_before_the_message(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    source = web.stubs.agents.CreateAgent(
        create_request(str(tmp_path), title="to fork"), timeout=30
    ).agent.id
    for reply in ("one", "two"):
        request = turn_pb.StreamTurnRequest(agent_id=source, content=text(f"/reply {reply}"))
        assert list(web.stubs.turns.StreamTurn(request, timeout=30))[-1].HasField("turn_completed")
    page = open_agent(browser, web, source)
    wait_rows_equal(page, web.stubs, source)
    page.click("[data-seq='3'] button.fork")  # the second user message
    page.wait_until(
        f"() => location.hash.startsWith('#/agent/') && location.hash !== '#/agent/{source}'"
    )
    fork_id = page.evaluate("() => location.hash.slice('#/agent/'.length)")
    forked = web.stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=fork_id), timeout=10).agent
    assert forked.labels["corral.forked-from"].startswith(f"{source}@")
    got = wait_rows_equal(page, web.stubs, fork_id)
    assert [r[1:] for r in got] == [r[1:] for r in daemon_rows(web.stubs, source)[:2]]
    page.screenshots("fork-from-here")
    page.close()
