"""More of the dashboard in a real browser: an attention routed in-app to this tab shows as a
notice; a sub-agent spawned from the page sits under its parent in the tree, and archiving
hides both behind the filter; a re-based timeline is reloaded and the page says so; a daemon
with tokens gets a token prompt, and the token stays in the tab's sessionStorage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.browser.browser import PHONE, Browser
from tests.browser.conftest import Web
from tests.browser.pages import state_is, wait_rows_equal
from tests.support.client import create_request, prompt_request, text
from tests.support.daemon import DaemonThread

pytestmark = pytest.mark.timeout(120)


def test_an_attention_routed_to_this_tab_shows_as_a_notice(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    page = browser.page(PHONE)
    page.goto(web.url)
    page.wait_for("text=No agents yet.")
    # Present (its first Heartbeat answered) before the attention, so the plan routes it here.
    page.wait_until(
        "() => performance.getEntriesByType('resource')"
        ".some((e) => e.name.endsWith('/Heartbeat') && e.responseEnd > 0)"
    )
    request = create_request(str(tmp_path), title="finisher")
    request.initial_prompt.extend(text("/reply all done"))
    agent = web.stubs.agents.CreateAgent(request, timeout=30).agent
    page.wait_for(f'[data-agent-id="{agent.id}"]')
    for _ in range(50):  # the reply is stored on the daemon's clock
        if page.count(".notice-attention"):
            break
        web.advance(100)
    page.wait_for(".notice-attention:has-text('finisher: finished')")
    page.wait_for(f'[data-agent-id="{agent.id}"] .attention:has-text("finished")')
    page.screenshots("attention-notice")
    page.close()


def test_a_sub_agent_sits_under_its_parent_and_archive_hides_both(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    parent = web.stubs.agents.CreateAgent(
        create_request(str(tmp_path), title="parent"), timeout=30
    ).agent
    page = browser.page(dark=True)
    page.goto(f"{web.url}#/agent/{parent.id}")
    page.click("button:has-text('Sub-agent')")
    page.fill("#spawn-task", "/reply child reporting")
    page.click(".spawn button:has-text('Spawn')")
    page.wait_for(".actions .status:has-text('Spawned sub-agent')")
    page.wait_for(".agent-head a.child")
    page.click(".runs summary")
    page.wait_for(".runs li:has-text('/reply child reporting') .status:has-text('ok')")
    page.screenshots("sub-agent-dark")
    page.click("text=← Agents")
    page.wait_for(f'[data-agent-id="{parent.id}"]')
    page.wait_for(".tree.children .agent-item")
    children = web.stubs.agents.ListAgents(
        agent_pb.ListAgentsRequest(parent_agent_id=parent.id), timeout=10
    ).agents
    assert len(children) == 1
    page.wait_for(f'.tree.children [data-agent-id="{children[0].id}"]')
    page.screenshots("tree-dark")

    page.click(f'[data-agent-id="{parent.id}"]')
    page.click("button:has-text('Archive')")
    page.wait_for(".actions .status:has-text('Archived 2 agents')")
    page.click("text=← Agents")
    page.wait_for(f'[data-agent-id="{parent.id}"]', state="detached")
    page.click("text=Show archived")
    page.wait_for(f'[data-agent-id="{parent.id}"] .badge:has-text("archived")')
    page.wait_for(f'.tree.children [data-agent-id="{children[0].id}"]')
    page.close()


def test_a_re_based_timeline_is_reloaded_and_the_page_says_so(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    agent = web.stubs.agents.CreateAgent(create_request(str(tmp_path)), timeout=30).agent
    web.stubs.turns.SendPrompt(prompt_request(agent.id, "before"), timeout=30)
    page = browser.page()
    page.goto(f"{web.url}#/agent/{agent.id}")
    page.wait_for(".row.user:has-text('before')")
    web.advance(1000)
    state_is(page, "idle")
    reload = agent_pb.ReloadAgentRequest(agent_id=agent.id, rehydrate_from_disk=True)
    web.stubs.agents.ReloadAgent(reload, timeout=30)
    page.wait_for(".notice-inline:has-text('Timeline reloaded')")
    page.wait_for(".row.user:has-text('before')", state="detached")
    web.stubs.turns.SendPrompt(prompt_request(agent.id, "after"), timeout=30)
    page.wait_for(".row.user:has-text('after')")
    web.advance(1000)
    web.stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id), timeout=30)
    wait_rows_equal(page, web.stubs, agent.id)
    page.screenshots("timeline-reset")
    page.close()


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[str, str]]:
    tokens = tmp_path / "tokens"
    tokens.write_text("right-token\n")
    tokens.chmod(0o600)
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0", auth_token_file=tokens)).start()
    try:
        assert daemon.daemon is not None
        yield f"http://127.0.0.1:{daemon.daemon.web_port}/", daemon.address
    finally:
        daemon.stop()


def test_a_daemon_with_tokens_gets_a_token_prompt(
    browser: Browser, guarded: tuple[str, str]
) -> None:
    url, address = guarded
    page = browser.page(PHONE)
    page.goto(url)
    page.wait_for("text=Token needed")
    page.screenshots("token-prompt")
    page.fill("#token", "wrong-token")
    page.click("button:has-text('Connect')")
    page.wait_for("text=The daemon refused that token.")
    page.fill("#token", "right-token")
    page.click("button:has-text('Connect')")
    page.wait_for("text=No agents yet.")
    kept = page.evaluate(
        "() => [sessionStorage.getItem('corral.token'), JSON.stringify(localStorage)]"
    )
    assert kept[0] == "right-token"
    assert "right-token" not in kept[1]
    # Every call carries it: an agent made with the token shows up live.
    with grpc.insecure_channel(address) as channel:
        from tests.support.client import Stubs

        stubs = Stubs.of(channel)
        metadata = (("authorization", "Bearer right-token"),)
        stubs.agents.CreateAgent(
            create_request("/tmp", title="guarded"), timeout=30, metadata=metadata
        )
    page.wait_for(".agent-item:has-text('guarded')")
    page.close()
