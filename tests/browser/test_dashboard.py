"""The dashboard in a real browser (headless chromium) against a real daemon in this process
(its clock a FakeClock the test advances): create and watch a reply stream, permissions,
queue / steer / replace, cancel's outcomes, two pages that agree, a 10,000-row timeline.
Each test leaves screenshots at phone and desktop width in .bench/screenshots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from tests.browser.browser import PHONE, Browser, Page
from tests.browser.conftest import Web
from tests.browser.pages import daemon_rows, page_rows, state_is, wait_rows_equal
from tests.support.client import create_request, text

pytestmark = pytest.mark.timeout(120)


def create(web: Web, cwd: Path, *lines: str, provider: str = "scripted", title: str = "") -> str:
    request = create_request(str(cwd), provider=provider, title=title)
    if lines:
        request.initial_prompt.extend(text(*lines))
    answer = web.stubs.agents.CreateAgent(request, timeout=30)
    return answer.agent.id


def open_agent(
    browser: Browser, web: Web, agent_id: str, size: tuple[int, int] | None = None
) -> Page:
    page = browser.page(size) if size else browser.page()
    page.goto(f"{web.url}#/agent/{agent_id}")
    page.wait_for(".agent-head h1")
    return page


def advance_until(
    web: Web, page: Page, selector: str, step_ms: int = 1000, steps: int = 60
) -> None:
    """Moves the daemon's clock on, a step at a time, until `selector` shows on the page."""
    for _ in range(steps):
        if page.count(selector):
            page.wait_for(selector)
            return
        web.advance(step_ms)
    page.wait_for(selector, timeout_ms=2000)


def test_create_an_agent_and_watch_its_reply_stream(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    page = browser.page()
    page.goto(web.url)
    page.click("text=+ New agent")
    page.wait_for('#provider option[value="scripted"]', state="attached")
    page.select("#provider", "scripted")
    page.fill("#cwd", str(tmp_path))
    page.fill("#title", "first agent")
    page.fill("#initial", "/reply **part one**\n/sleep 1000\n/reply part two")
    page.screenshots("create-form")
    page.click("button:has-text('Create')")
    page.wait_for(".row.user:has-text('part two')")
    state_is(page, "running")
    page.wait_for(".live")
    # The reply's chunks are stored as one row once the message ends (on the daemon's clock).
    advance_until(web, page, ".row.assistant strong:has-text('part one')", step_ms=100)
    assert page.count(".row.assistant:has-text('part two')") == 0
    state_is(page, "running")
    advance_until(web, page, ".row.assistant:has-text('part two')", step_ms=100)
    state_is(page, "idle")
    agent_id = page.evaluate("() => location.hash.split('/')[2]")
    wait_rows_equal(page, web.stubs, agent_id)
    page.screenshots("create-and-stream")
    page.click("text=← Agents")
    page.wait_for(f'[data-agent-id="{agent_id}"]:has-text("first agent")')
    page.wait_for(f'[data-agent-id="{agent_id}"] [data-state="idle"]')
    page.screenshots("agents-list")
    assert page.errors() == []
    page.close()


def test_answer_a_permission_with_a_note(browser: Browser, web: Web, tmp_path: Path) -> None:
    agent_id = create(web, tmp_path, "/permission write_file", title="asks")
    page = open_agent(browser, web, agent_id, PHONE)
    page.wait_for(".permission:has-text('write_file')")
    page.fill(".permission input", "go ahead")
    page.screenshots("permission")
    page.click(".permission button:has-text('Allow')")
    page.wait_for(".permission", state="detached")
    state_is(page, "idle")
    agent = web.stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id), timeout=10).agent
    assert not agent.pending_permissions
    rows = wait_rows_equal(page, web.stubs, agent_id)
    assert ["toolCall", "write_file:3"] in [r[1:] for r in rows]  # 3 = COMPLETED
    page.close()


def test_queue_steer_and_replace_while_a_turn_runs(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    agent_id = create(web, tmp_path, provider="steerer", title="steering")
    page = open_agent(browser, web, agent_id)
    page.fill("#prompt-text", "/reply started\n/sleep 5000\n/reply first turn done")
    page.click(".prompt button:has-text('Send')")
    advance_until(web, page, ".row.assistant:has-text('started')", step_ms=100)
    state_is(page, "running")

    page.fill("#prompt-text", "queued one")
    page.click(".prompt button:has-text('Queue')")
    page.wait_for(".queued li:has-text('queued one')")
    page.fill("#prompt-text", "queued then removed")
    page.click(".prompt button:has-text('Queue')")
    page.wait_for(".queued li:has-text('queued then removed')")
    page.screenshots("queued")
    page.click(".queued li:has-text('queued then removed') button")
    page.wait_for(".queued li:has-text('queued then removed')", state="detached")

    page.fill("#prompt-text", "/reply steered in")
    page.click(".prompt button:has-text('Steer')")
    page.wait_for(".prompt .status:has-text('Steered into the running turn')")
    page.wait_for(".row.user:has-text('steered in')")

    page.fill("#prompt-text", "/reply the replacement")
    page.click(".prompt button:has-text('Replace')")
    page.wait_for(".prompt .status:has-text('Replaced')")
    page.wait_for(".row.assistant:has-text('the replacement')")
    page.wait_for(".row.assistant:has-text('You said: queued one')")
    state_is(page, "idle")
    rows = wait_rows_equal(page, web.stubs, agent_id)
    words = [r[2] for r in rows]
    assert "queued then removed" not in words
    assert "first turn done" not in words  # the replaced turn never got there
    assert words.index("the replacement") < words.index("You said: queued one")
    page.screenshots("steer-replace")
    page.close()


def test_cancel_shows_its_three_outcomes(browser: Browser, web: Web, tmp_path: Path) -> None:
    agent_id = create(web, tmp_path, title="cancels")
    page = open_agent(browser, web, agent_id, PHONE)
    page.click("button:has-text('Cancel turn')")
    page.wait_for(".actions .status:has-text('Nothing to cancel')")

    page.fill("#prompt-text", "/sleep 60000")
    page.click(".prompt button:has-text('Send')")
    state_is(page, "running")
    page.click("button:has-text('Cancel turn')")
    page.wait_for(".actions .status:has-text('Canceled: the turn has ended')")
    page.wait_for(".row.err:has-text('TURN_CANCELED')")
    state_is(page, "idle")

    page.fill("#prompt-text", "/refuse-interrupt\n/sleep 600000")
    page.click(".prompt button:has-text('Send')")
    state_is(page, "running")
    page.click("button:has-text('Cancel turn')")
    advance_until(web, page, ".actions .status:has-text('Refused')")
    state_is(page, "running")
    page.screenshots("cancel-refused")
    page.close()


def test_two_pages_on_one_agent_end_with_the_same_timeline(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    agent_id = create(web, tmp_path, '/think pondering\n/tool read_file {"path": "a"}\n/reply one')
    phone = open_agent(browser, web, agent_id, PHONE)
    desktop = open_agent(browser, web, agent_id)
    for n in range(3):
        state_is(desktop, "idle")
        desktop.fill("#prompt-text", f"/reply round {n}\n/sleep 100\n/reply after {n}")
        if n == 1:
            desktop.press("#prompt-text", "Control+Enter")  # the keyboard's way
        else:
            desktop.click(".prompt button:has-text('Send')")
        desktop.wait_for(f".row.user:has-text('round {n}')")
        web.advance(100)
        state_is(desktop, "idle")
    state_is(phone, "idle")
    want = wait_rows_equal(desktop, web.stubs, agent_id)
    assert wait_rows_equal(phone, web.stubs, agent_id) == want
    assert page_rows(phone) == page_rows(desktop)
    assert [r[0] for r in want] == list(range(1, len(want) + 1))
    phone.click(".row.tool summary")
    phone.screenshots("two-pages-phone")
    desktop.screenshots("two-pages-desktop")
    phone.close()
    desktop.close()


def test_a_10000_row_timeline_pages_back_to_its_first_row(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    agent_id = create(web, tmp_path, "/history 10000", title="long")
    rows = daemon_rows(web.stubs, agent_id)
    assert len(rows) > 10_000
    page = open_agent(browser, web, agent_id)
    page.wait_until(
        "() => { const m = window.corralTimeline; return m && !m.loading && m.rows.length >= 200; }"
    )
    in_dom = page.count("[data-seq]")
    assert 0 < in_dom < 120, in_dom
    last = rows[-1][0]
    page.wait_for(f'[data-seq="{last}"]')
    for _ in range(200):
        if page.count('[data-seq="1"]'):
            break
        page.evaluate("() => { document.querySelector('.scroller').scrollTop = 0; }")
        page.wait_until("() => !window.corralTimeline.loadingOlder")
    page.wait_for('[data-seq="1"]')
    page.wait_for(".older:has-text('Beginning of the timeline')")
    assert page.count("[data-seq]") < 120
    assert page_rows(page) == rows
    page.screenshots("ten-thousand-first-row")
    page.close()


def test_agent_text_is_never_markup(browser: Browser, web: Web, tmp_path: Path) -> None:
    hostile = (
        '/reply <img src=x onerror="window.owned=1"> <script>window.owned=2</script> '
        "[click](javascript:window.owned=3) <b>not bold</b> [ok](https://example.com/)"
    )
    agent_id = create(web, tmp_path, hostile)
    page = open_agent(browser, web, agent_id)
    advance_until(web, page, ".row.assistant:has-text('not bold')", step_ms=100)
    reply = ".row.assistant .md"
    assert page.count(f"{reply} img, {reply} script, {reply} b") == 0
    assert page.count(f'{reply} a[href^="javascript"]') == 0
    assert page.count(f'{reply} a[href="https://example.com/"]') == 1
    assert "<img src=x" in page.texts(reply)[0]
    assert page.evaluate("() => window.owned ?? null") is None
    page.close()
