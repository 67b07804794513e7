"""kill -9 and restart the daemon (a `corral serve` subprocess on a state directory) in the
middle of a turn: the page says it is reconnecting, resumes with its revision and
incarnation once the daemon is back on the same web port, and ends with exactly the
daemon's rows: none missing, none twice."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.browser.browser import Browser
from tests.browser.pages import page_rows, wait_rows_equal
from tests.support.client import Stubs, SyncStubs, create_request, prompt_request
from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.web_port = free_port()
        self.url = f"http://127.0.0.1:{self.web_port}/"
        self.proc: DaemonProcess | None = None
        self.channel: grpc.Channel | None = None

    def start(self) -> SyncStubs:
        self.proc = DaemonProcess(
            self.state_dir, "--web-listen", f"127.0.0.1:{self.web_port}", "--log-level", "ERROR"
        ).start()
        self.channel = grpc.insecure_channel(self.proc.address)
        return Stubs.of(self.channel)

    def kill(self) -> None:
        assert self.proc is not None and self.channel is not None
        self.channel.close()
        self.proc.stop()  # SIGKILL


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "state")
    yield s
    s.kill()


def test_kill_9_and_restart_mid_turn_leaves_no_gap_and_no_duplicate(
    browser: Browser, served: Served, tmp_path: Path
) -> None:
    stubs = served.start()
    agent = stubs.agents.CreateAgent(
        create_request(str(tmp_path), title="survivor"), timeout=30
    ).agent
    page = browser.page()
    page.goto(f"{served.url}#/agent/{agent.id}")
    page.wait_for(".agent-head h1")
    steps = [line for n in range(60) for line in (f"/reply step {n}", "/sleep 100")]
    stubs.turns.SendPrompt(prompt_request(agent.id, *steps), timeout=30)
    page.wait_for(".row.assistant:has-text('step 4')")

    served.kill()
    page.wait_for(".banner:has-text('Reconnecting')")
    held = page_rows(page)
    stubs = served.start()
    page.wait_for(".banner", state="detached", timeout_ms=30_000)

    # The interrupted turn ends with a DAEMON_RESTARTED row; then one more turn, live.
    idle = turn_pb.WaitForIdleRequest(agent_id=agent.id)
    stubs.turns.WaitForIdle(idle, timeout=30)
    page.fill("#prompt-text", "after the restart")
    page.click(".prompt button:has-text('Send')")
    page.wait_for(".row.assistant:has-text('You said: after the restart')")
    stubs.turns.WaitForIdle(idle, timeout=30)

    rows = wait_rows_equal(page, stubs, agent.id)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[: len(held)] == held  # what the page held before the kill is unchanged
    assert any(r[1] == "error" and r[2].startswith("DAEMON_RESTARTED") for r in rows)
    seqs = page.evaluate(
        "() => [...document.querySelectorAll('[data-seq]')].map((n) => n.dataset.seq)"
    )
    assert len(seqs) == len(set(seqs))
    # Resumed (revision + incarnation of the durable event log), not reloaded.
    assert page.evaluate("() => window.corralTimeline.resetNote") == ""
    final = stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent.id), timeout=10).agent
    assert final.timeline.next_seq == len(rows) + 1
    page.screenshots("after-restart")
    page.close()


def test_a_daemon_with_another_event_log_resets_the_page_and_says_so(
    browser: Browser, served: Served, tmp_path: Path
) -> None:
    stubs = served.start()
    agent = stubs.agents.CreateAgent(create_request(str(tmp_path), title="old"), timeout=30).agent
    page = browser.page()
    page.goto(served.url)
    page.wait_for(f'[data-agent-id="{agent.id}"]')
    served.kill()
    page.wait_for(".banner:has-text('Reconnecting')")
    # Another state directory on the same port: another incarnation of the event log, whose
    # revisions mean nothing to the page's resume point.
    served.state_dir = tmp_path / "other-state"
    served.start()
    page.wait_for(".notice:has-text('could not replay what this page missed')", timeout_ms=30_000)
    page.wait_for(f'[data-agent-id="{agent.id}"]', state="detached")
    page.wait_for("text=No agents yet.")
    page.screenshots("reset-by-another-daemon")
    page.close()
