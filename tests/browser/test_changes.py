"""The agent page's changes in a real browser, on a real git worktree: the changed files with
their counts, a file's diff on a click, the branch in the header, and a refresh of the list
when a turn ends (the `changes_updated` event)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from tests.browser.browser import Browser
from tests.browser.conftest import Web
from tests.support.client import create_request, prompt_request
from tests.support.git_repos import make_repo

pytestmark = pytest.mark.timeout(120)
# The page writes removed lines with a minus sign (U+2212), as \u2212 here.


def test_the_page_lists_changed_files_shows_a_diff_and_refreshes_after_a_turn(
    browser: Browser, web: Web, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "one\n"})
    request = create_request(
        str(repo), title="changer", worktree=agent_pb.WorktreeRequest(branch="page/changes")
    )
    agent = web.stubs.agents.CreateAgent(request, timeout=30).agent
    root = Path(agent.workspace.path)
    (root / "README.md").write_text("one\ntwo\n")
    page = browser.page()
    page.goto(f"{web.url}#/agent/{agent.id}")
    page.wait_for("[data-testid=branch]:has-text('page/changes')")
    page.click(".changes summary")
    page.wait_for(".changed-files [data-path='README.md']:has-text('+1 \u22120')")
    page.click(".changed-files [data-path='README.md']")
    page.wait_for("[data-testid=diff] .diff-add:has-text('+two')")
    # A file written, then a turn: its end publishes changes_updated, and the list reloads.
    (root / "notes.txt").write_text("a\nb\nc\n")
    web.stubs.turns.SendPrompt(prompt_request(agent.id, "/reply done"), timeout=30)
    for _ in range(50):  # the reply is stored on the daemon's clock
        if page.count(".changed-files [data-path='notes.txt']"):
            break
        web.advance(100)
    page.wait_for(".changed-files [data-path='notes.txt']:has-text('+3 \u22120')")
    page.wait_for("[data-testid=changes-count]:has-text('2 · +4 \u22120')")
    assert page.errors() == []
    page.screenshots("changes")
    page.close()
