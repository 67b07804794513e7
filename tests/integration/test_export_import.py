"""ExportAgent and ImportAgentExport through the wire: the JSON Lines file holds the agent's
header and every row (seq, epoch, timestamp, turn, item) as FetchTimeline answers them; it
comes back as a new idle agent with the same rows, and exporting that one gives the same file
but for ids and times; Markdown is for people; a hostile or cut file is refused with its line
number and creates nothing; an export of a state directory from before totals works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.rpc.export_jsonl import FORMAT
from tests.integration.test_usage import as_before_the_ledger, serving
from tests.support.client import Stubs, create_request, error_details, text

PROMPTS = (
    ("/think pondering", '/tool grep {"pattern": "x", "n": 3}', "/reply done ✓ «quoted»"),
    ("/fail it broke",),
    ("plain words",),
)


async def agent_with_history(stubs: Stubs, cwd: Path) -> str:
    request = create_request(str(cwd), title="the title", labels={"team": "blue"})
    agent_id = str((await stubs.agents.CreateAgent(request)).agent.id)
    for lines in PROMPTS:
        call = stubs.turns.StreamTurn(
            turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
        )
        _ = [e async for e in call]
    return agent_id


async def export(
    stubs: Stubs, agent_id: str, fmt: svc_pb.ExportFormat.ValueType = svc_pb.EXPORT_FORMAT_JSONL
) -> bytes:
    call = stubs.agents.ExportAgent(svc_pb.ExportAgentRequest(agent_id=agent_id, format=fmt))
    return b"".join([chunk.data async for chunk in call])


async def import_file(stubs: Stubs, data: bytes, size: int = 100, **kw: Any) -> Any:
    async def chunks() -> Any:
        first = True
        for start in range(0, max(len(data), 1), size):
            extra = kw if first else {}
            first = False
            yield svc_pb.ImportAgentExportRequest(data=data[start : start + size], **extra)

    return await stubs.agents.ImportAgentExport(chunks())


def lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines()]


async def agent_count(stubs: Stubs) -> int:
    listed = await stubs.agents.ListAgents(svc_pb.ListAgentsRequest(include_archived=True))
    return len(listed.agents)


def portable(data: bytes) -> list[dict[str, Any]]:
    """The file without what an import changes: ids, times and the runtime state."""
    header, *rows = lines(data)
    agent = header["agent"]
    kept = {k: agent.get(k) for k in ("provider", "cwd", "model", "mode", "title", "labels")}
    return [
        {**header, "agent": kept},
        *({k: v for k, v in r.items() if k != "epoch"} for r in rows),
    ]


async def test_a_jsonl_export_holds_every_row_and_imports_back_the_same(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "state") as (_, stubs):
        agent_id = await agent_with_history(stubs, tmp_path)
        data = await export(stubs, agent_id)
        page = await stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
        )
        header, *rows, end = lines(data)
        assert header["format"] == FORMAT and header["agent"]["id"] == agent_id
        assert header["rows"] == len(page.rows) == len(rows) and end == {"end": {"rows": len(rows)}}
        for row, stored in zip(rows, page.rows, strict=True):
            assert row["epoch"] == page.epoch and int(row["seq"]) == stored.seq
            assert row["turn_id"] == stored.turn_id
            assert row["timestamp"] == stored.timestamp.ToJsonString()
        assert {"reasoning", "tool_call", "assistant_message", "error", "user_message"} <= {
            kind for r in rows for kind in r["item"]
        }

        before = await agent_count(stubs)
        imported = await import_file(stubs, data)
        assert imported.rows == len(rows) and await agent_count(stubs) == before + 1
        agent = imported.agent
        assert agent.id != agent_id and agent.lifecycle.HasField("idle")
        assert (agent.title, dict(agent.labels)) == ("the title", {"team": "blue"})
        assert agent.usage_total.output_tokens == 0  # an import starts from zero
        copy = await stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(agent_id=agent.id, limit=0)
        )
        assert copy.epoch != page.epoch
        assert list(copy.rows) == list(page.rows)  # seq, time, turn, item, message id
        again = await export(stubs, agent.id)
        assert portable(again) == portable(data)

        call = stubs.turns.StreamTurn(
            turn_pb.StreamTurnRequest(agent_id=agent.id, content=text("/reply still works"))
        )
        assert [e async for e in call][-1].HasField("turn_completed")


async def test_a_markdown_export_reads_as_a_conversation(tmp_path: Path) -> None:
    async with serving(tmp_path / "state") as (_, stubs):
        agent_id = await agent_with_history(stubs, tmp_path)
        md = (await export(stubs, agent_id, svc_pb.EXPORT_FORMAT_MARKDOWN)).decode()
    assert md.startswith("# the title\n")
    assert "## 1. User ·" in md and "done ✓ «quoted»" in md and "> pondering" in md
    assert "Tool `grep` (completed)" in md and '"pattern": "x"' in md
    assert "Error" in md and "it broke" in md


def cut(data: bytes, keep_lines: int) -> bytes:
    return b"".join(data.splitlines(keepends=True)[:keep_lines])


async def test_a_hostile_or_cut_file_is_refused_with_its_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "state") as (_, stubs):
        agent_id = await agent_with_history(stubs, tmp_path)
        data = await export(stubs, agent_id)
        rows = data.splitlines(keepends=True)
        n = len(rows)
        row = json.loads(rows[1])
        cases = [
            (b"", 1),
            (b"not json\n", 1),
            (b'{"format": "something else"}\n', 1),
            (cut(data, n - 1), n),  # the end line is missing
            (cut(data, 3), 4),  # rows missing too
            (data[: len(data) - len(rows[-1]) - 7], n - 1),  # cut inside a row
            (data + b"{}\n", n + 1),  # a line after the end
            (rows[0] + rows[1] + b"".join(rows[3:]), 3),  # a gap in the seqs
            (rows[0] + json.dumps({**row, "extra": 1}).encode() + b"\n", 2),  # unknown field
            (rows[0] + json.dumps({**row, "item": {}}).encode() + b"\n", 2),  # no item kind
            (rows[0] + json.dumps({**row, "seq": "x"}).encode() + b"\n", 2),
            (rows[0] + b"[1, 2]\n", 2),
        ]
        header = json.loads(rows[0])
        bad_agent = {**header, "agent": {**header["agent"], "title": "t" * 1001}}
        cases.append((json.dumps(bad_agent).encode() + b"\n" + b"".join(rows[1:]), 1))
        before = await agent_count(stubs)
        for body, line in cases:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await import_file(stubs, body)
            details = error_details(raised.value)
            assert (details.code, details.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "BAD_IMPORT_FILE",
            ), body[:80]
            assert details.message.startswith(f"line {line}:"), (details.message, line)
        assert await agent_count(stubs) == before
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await import_file(stubs, data, cwd=str(tmp_path / "missing"))
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert await agent_count(stubs) == before


async def test_an_agent_of_a_state_directory_from_before_totals_exports(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with serving(state) as (_, stubs):
        agent_id = await agent_with_history(stubs, tmp_path)
    as_before_the_ledger(state)
    async with serving(state) as (_, stubs):
        data = await export(stubs, agent_id)
        header, *rows, _ = lines(data)
        assert header["agent"]["id"] == agent_id and len(rows) == header["rows"] > 0
        imported = await import_file(stubs, data, size=1 << 20)
        assert imported.rows == len(rows)
