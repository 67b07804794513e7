"""The dashboard: its compressed size, and how long the agent page of a
10,000-row agent takes in headless Chromium from navigation until the page holds the last
200 rows and the newest one is on screen.

A real daemon in this process with its web port on, one scripted agent whose timeline is made
by `/history 10000`, and the browser the browser tests use (tests/browser/browser.py). Each
load is a new tab; the time is read in the page (performance.now(), from the navigation's
start), polled every animation frame. Goals: under 1 s; under 300 KB gzipped.

Run: .venv/bin/python -m bench.dashboard
"""

from __future__ import annotations

import gzip
import statistics
import tempfile
from pathlib import Path

import grpc

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import content_pb2 as content_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.web.static import STATIC_DIR
from tests.browser.browser import Browser
from tests.support.client import Stubs
from tests.support.daemon import DaemonThread

ROWS = 10_000
LOADS = 7
# In the page: the time since navigation once the last 200 rows are held and the newest row is
# inside the viewport (null until then).
READY_JS = """(last) => {
  const model = window.corralTimeline;
  if (!model || model.loading || model.rows.length < 200) return null;
  if (Number(model.rows[model.rows.length - 1].seq) !== last) return null;
  const node = document.querySelector(`[data-seq="${last}"]`);
  if (!node) return null;
  const box = node.getBoundingClientRect();
  if (box.height === 0 || box.top >= innerHeight || box.bottom <= 0) return null;
  const tail = performance.getEntriesByType("resource")
    .find((e) => e.name.endsWith("/FetchTimeline"));
  return [performance.now(), tail ? tail.startTime : -1, tail ? tail.responseEnd : -1];
}"""


def gzip_sizes(root: Path = STATIC_DIR) -> dict[str, int]:
    """Each built file's size gzipped (level 9), by name."""
    return {
        path.name: len(gzip.compress(path.read_bytes(), 9, mtime=0))
        for path in sorted(root.iterdir())
        if path.is_file()
    }


def page_load_ms(loads: int = LOADS) -> list[tuple[float, float, float]]:
    """(ready, tail fetch start, tail fetch end) per load, ms since navigation."""
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0")).start()
    channel = grpc.insecure_channel(daemon.address)
    browser = Browser()
    try:
        stubs = Stubs.of(channel)
        with tempfile.TemporaryDirectory() as cwd:
            prompt = [content_pb.ContentPart(text=f"/history {ROWS}")]
            request = agent_pb.CreateAgentRequest(
                provider="scripted", cwd=cwd, initial_prompt=prompt
            )
            agent = stubs.agents.CreateAgent(request, timeout=60).agent
            stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id), timeout=60)
            get = agent_pb.GetAgentRequest(agent_id=agent.id)
            last = stubs.agents.GetAgent(get, timeout=10).agent.timeline.next_seq - 1
        assert daemon.daemon is not None
        url = f"http://127.0.0.1:{daemon.daemon.web_port}/#/agent/{agent.id}"
        times: list[tuple[float, float, float]] = []
        for _ in range(loads):
            page = browser.page()
            page.goto(url)
            ready, start, end = page.wait_until(READY_JS, last, 30_000, every_frame=True)
            times.append((float(ready), float(start), float(end)))
            page.close()
        return times
    finally:
        browser.close()
        channel.close()
        daemon.stop()


def report(sizes: dict[str, int], loads: list[tuple[float, float, float]]) -> str:
    code = sizes.get("app.js", 0) + sizes.get("app.css", 0) + sizes.get("index.html", 0)
    total = sum(sizes.values())
    ready = [r for r, _, _ in loads]
    median = statistics.median
    return "\n".join(
        [
            f"dashboard gzip: {total / 1024:.1f} KB in all ({code / 1024:.1f} KB index.html + "
            f"app.js + app.css; the rest icons and manifest) (goal < 300 KB)",
            f"dashboard agent page, {ROWS:,}-row agent, navigation to the last 200 rows on "
            f"screen: median {median(ready):.0f} ms, first (cold) {ready[0]:.0f} ms, best "
            f"{min(ready):.0f} ms over {len(ready)} loads (goal < 1000 ms); of which, medians: "
            f"until the tail is asked {median(s for _, s, _ in loads):.0f} ms (page and script "
            f"load), the FetchTimeline TAIL {median(e - s for _, s, e in loads):.0f} ms, "
            f"after its answer {median(r - e for r, _, e in loads):.0f} ms (decode and render)",
        ]
    )


def main() -> None:
    print(report(gzip_sizes(), page_load_ms()))


if __name__ == "__main__":
    main()
