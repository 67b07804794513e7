"""The dashboard under a read-only token, in a real browser: the page shows the agents, the
timeline and a pending permission, and none of the controls the token may not use (new agent,
prompt box, turn and agent actions, permission answers, removing queued prompts); under a full
token the same page has them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.browser.browser import Browser, Page
from tests.browser.conftest import page_daemon
from tests.support.client import SyncStubs, create_request, prompt_request

pytestmark = pytest.mark.timeout(120)

FULL, READER = "full-token-for-the-page", "reader-token-for-the-page"
WRITE_CONTROLS = (
    "a:has-text('New agent')",
    "#prompt-text",
    "button:has-text('Cancel turn')",
    "button:has-text('Archive')",
    "button:has-text('Allow')",
    "button:has-text('Remove')",
    "button.fork",
)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[str, SyncStubs]]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{FULL}\n{READER} read\n")
    tokens.chmod(0o600)
    with page_daemon(Config(auth_token_file=tokens)) as served:
        yield served


def busy_agent(stubs: SyncStubs, cwd: str) -> str:
    """An agent waiting on a permission, with a prompt queued behind the turn."""
    full = (("authorization", f"Bearer {FULL}"),)
    agent = stubs.agents.CreateAgent(create_request(cwd, title="watched"), metadata=full).agent
    stubs.turns.SendPrompt(prompt_request(agent.id, "/permission Bash"), metadata=full)
    stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id), metadata=full)
    queued = prompt_request(agent.id, "later", if_running=turn_pb.IF_RUNNING_QUEUE)
    stubs.turns.SendPrompt(queued, metadata=full)
    return str(agent.id)


def open_with(browser: Browser, url: str, token: str, agent_id: str) -> Page:
    page = browser.page()
    page.goto(url)
    page.wait_for("text=Token needed")
    page.fill("#token", token)
    page.click("button:has-text('Connect')")
    page.wait_for(".agent-item:has-text('watched')")
    page.goto(f"{url}#/agent/{agent_id}")
    page.wait_for(".permission")
    page.wait_for(".queued:has-text('later')")
    return page


def test_a_read_token_sees_everything_and_no_control_it_cannot_use(
    browser: Browser, guarded: tuple[str, SyncStubs], tmp_path: Path
) -> None:
    url, stubs = guarded
    agent_id = busy_agent(stubs, str(tmp_path))

    full = open_with(browser, url, FULL, agent_id)
    for selector in WRITE_CONTROLS:
        assert full.count(selector) >= 1, selector
    full.close()

    page = open_with(browser, url, READER, agent_id)
    page.wait_for("text=Waiting for an answer")
    page.wait_for("[data-testid=read-only]")
    page.wait_for(".row.user:has-text('/permission Bash')")
    for selector in WRITE_CONTROLS:
        assert page.count(selector) == 0, selector
    page.goto(f"{url}#/new")
    page.wait_for("[data-testid=read-only]")
    assert page.count("#provider") == 0
    assert page.errors() == []
    page.screenshots("read-only")
    page.close()
