"""What the browser tests read off the dashboard and compare with the daemon's own answer."""

from __future__ import annotations

from typing import Any

from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from tests.browser.browser import Page
from tests.support.client import SyncStubs

# The rows the open agent page holds, as (seq, kind, words) with the same words as `row_key`.
ROWS_JS = """() => {
  const model = window.corralTimeline;
  if (!model || model.loading) return null;
  return model.rows.map((r) => {
    const k = r.item?.kind;
    let words = "";
    switch (k?.case) {
      case "userMessage": case "assistantMessage": case "reasoning": words = k.value.text; break;
      case "toolCall": words = `${k.value.name}:${k.value.status}`; break;
      case "error": words = `${k.value.code}:${k.value.message}`; break;
      case "subagentNotice": words = k.value.text; break;
      default: break;
    }
    return [Number(r.seq), k?.case ?? "", words];
  });
}"""

_KINDS = {
    "user_message": "userMessage",
    "assistant_message": "assistantMessage",
    "reasoning": "reasoning",
    "tool_call": "toolCall",
    "todo": "todo",
    "error": "error",
    "compaction": "compaction",
    "subagent_notice": "subagentNotice",
}


def row_key(row: timeline_pb.TimelineRow) -> list[Any]:
    kind = row.item.WhichOneof("kind") or ""
    words = ""
    if kind in ("user_message", "assistant_message", "reasoning"):
        words = getattr(row.item, kind).text
    elif kind == "tool_call":
        words = f"{row.item.tool_call.name}:{row.item.tool_call.status}"
    elif kind == "error":
        words = f"{row.item.error.code}:{row.item.error.message}"
    elif kind == "subagent_notice":
        words = row.item.subagent_notice.text
    return [row.seq, _KINDS.get(kind, ""), words]


def daemon_rows(stubs: SyncStubs, agent_id: str) -> list[list[Any]]:
    """The whole timeline as the daemon answers it (gRPC), in the page's terms."""
    page = stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0), timeout=30
    )
    rows = list(page.rows)
    while page.has_older:  # a page holds at most 10,000 rows
        page = stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(
                agent_id=agent_id,
                direction=tl_pb.TIMELINE_DIRECTION_BEFORE,
                cursor=page.start_cursor,
                limit=0,
            ),
            timeout=30,
        )
        rows[:0] = page.rows
    return [row_key(r) for r in rows]


def page_rows(page: Page) -> list[list[Any]]:
    rows: list[list[Any]] = page.wait_until(ROWS_JS)
    return rows


def wait_rows_equal(
    page: Page, stubs: SyncStubs, agent_id: str, timeout_ms: int = 15_000
) -> list[list[Any]]:
    """Polls until the page holds exactly the daemon's rows; returns them."""
    want = daemon_rows(stubs, agent_id)
    got: list[list[Any]] = page.wait_until(
        f"(want) => {{ const rows = ({ROWS_JS})(); "
        "return rows && JSON.stringify(rows) === JSON.stringify(want) ? rows : null; }",
        want,
        timeout_ms,
    )
    return got


def state_is(page: Page, state: str, timeout_ms: int = 15_000) -> None:
    page.wait_for(f'.agent-head [data-state="{state}"]', timeout_ms=timeout_ms)
