"""A tool output kept apart from its row, in a real browser: the row shows the preview and
"N bytes kept apart — show all", which pages the whole output in with FetchToolOutput (one
page in flight at a time, each shown as it arrives), byte for byte; an output that is gone
meanwhile is a clear error that keeps what had arrived."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.v1 import turn_service_pb2 as turn_pb
from tests.browser.browser import Browser, Page
from tests.browser.conftest import Web
from tests.browser.pages import wait_rows_equal
from tests.browser.test_dashboard import open_agent
from tests.integration.test_tool_output import expected_output
from tests.support.client import create_request, text

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
SIZE = 2 * MIB + 12_345  # three pages of the page's 1 MiB

# Counts the page's FetchToolOutput calls, how many are open at once (a call is open until its
# answer's body is read) and, while `hold` is set, keeps every call after the first waiting
# until `release()`: the test sees the page between two pages.
WATCH_FETCH = """() => {
  const w = { count: 0, open: 0, most: 0, hold: true, waiting: [] };
  w.release = () => { w.hold = false; w.waiting.splice(0).forEach((go) => go()); };
  const real = window.fetch.bind(window);
  window.fetch = async (url, init) => {
    if (!String(url).endsWith("/FetchToolOutput")) return real(url, init);
    w.count += 1; w.open += 1; w.most = Math.max(w.most, w.open);
    try {
      if (w.hold && w.count > 1) await new Promise((go) => w.waiting.push(go));
      const answer = await real(url, init);
      await answer.clone().arrayBuffer();
      return answer;
    } finally { w.open -= 1; }
  };
  window.toolFetch = w;
}"""


def tool_agent(web: Web, cwd: Path) -> str:
    agent_id = web.stubs.agents.CreateAgent(create_request(str(cwd)), timeout=30).agent.id
    request = turn_pb.StreamTurnRequest(
        agent_id=agent_id, content=text(f"/tool-output shell {SIZE}")
    )
    assert list(web.stubs.turns.StreamTurn(request, timeout=60))[-1].HasField("turn_completed")
    return str(agent_id)


def open_tool_row(browser: Browser, web: Web, agent_id: str) -> Page:
    page = open_agent(browser, web, agent_id)
    wait_rows_equal(page, web.stubs, agent_id)
    page.evaluate(WATCH_FETCH)
    page.click(".row.tool summary")
    page.wait_for(".tool-output button.show-all")
    return page


def first_page_shown(page: Page) -> None:
    """Waits until the first page is on screen and the second is asked for (and held)."""
    page.wait_until(
        f"() => document.querySelector('.tool-output pre.all')?.textContent.length === {MIB}"
        " && window.toolFetch.waiting.length === 1",
        timeout_ms=60_000,
    )


def test_show_all_pages_the_whole_output_in_one_page_at_a_time(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    agent_id = tool_agent(web, tmp_path)
    page = open_tool_row(browser, web, agent_id)
    want = expected_output(SIZE).decode()
    assert page.texts(".tool-output pre.preview") == [want[:4096]]
    assert page.texts(".tool-output button.show-all") == ["2,109,497 bytes kept apart — show all"]
    page.click(".tool-output button.show-all")
    first_page_shown(page)  # progressive: page one is shown while page two waits
    assert page.texts(".tool-output .progress") == ["Loading… 1,048,576 of 2,109,497 bytes"]
    page.evaluate("() => window.toolFetch.release()")
    # Attached, not visible: laying out 200,000 lines can take long on a loaded machine.
    page.wait_for(".tool-output pre.all[data-done='1']", state="attached", timeout_ms=60_000)
    assert page.evaluate("() => document.querySelector('.tool-output pre.all').textContent") == want
    watched = page.evaluate("() => [window.toolFetch.count, window.toolFetch.most]")
    assert watched == [3, 1]  # three pages, never two at once
    assert page.count(".tool-output .progress, .tool-output pre.preview") == 0
    page.screenshots("tool-output-all")
    assert page.errors() == []
    page.close()


def test_an_output_gone_midway_is_a_clear_error_that_keeps_what_arrived(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    agent_id = tool_agent(web, tmp_path)
    page = open_tool_row(browser, web, agent_id)
    page.click(".tool-output button.show-all")
    first_page_shown(page)
    forget_outputs(web, agent_id)  # as the in-memory store's eviction does; the row stays
    page.evaluate("() => window.toolFetch.release()")
    page.wait_for(".tool-output [role='alert']", state="attached", timeout_ms=60_000)
    [alert] = page.texts(".tool-output [role='alert']")
    assert "no longer kept" in alert and "1,048,576 of 2,109,497 bytes had arrived" in alert
    shown = page.evaluate("() => document.querySelector('.tool-output pre.all').textContent")
    assert shown == expected_output(MIB).decode()
    assert page.count(".tool-output .progress") == 0
    page.screenshots("tool-output-gone")
    page.close()


def forget_outputs(web: Web, agent_id: str) -> None:
    """Drops the agent's kept-apart outputs inside the daemon (on its loop), leaving the rows."""
    daemon = web.daemon.daemon
    assert daemon is not None
    outputs = daemon.timeline._outputs  # type: ignore[attr-defined]

    async def sweep() -> None:
        outputs.sweep(agent_id, None)

    web.daemon.run(sweep())
