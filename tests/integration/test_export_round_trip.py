"""The round trip as a property, through the wire: any rows (every item kind, any text and
JSON) written as an export file are imported; exporting that agent, importing the export and
exporting again gives the same file but for the ids and times an import changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral_server.domain import timeline as dt
from corral_server.rpc import export_jsonl
from corral_server.rpc.items import row_to_pb
from tests.support.client import Stubs, SyncStubs
from tests.support.daemon import DaemonThread
from tests.support.items import clean_items

ROWS = st.lists(
    st.builds(
        dt.TimelineRow,
        st.just(0),
        st.integers(0, 2**41),
        clean_items,
        st.text(max_size=20),
        st.text(max_size=20),
    ),
    max_size=6,
)


@pytest.fixture(scope="module")
def stubs(grpc_server: DaemonThread) -> Iterator[SyncStubs]:
    with grpc.insecure_channel(grpc_server.address) as channel:
        yield Stubs.of(channel)


def file_of(rows: list[dt.TimelineRow], cwd: str) -> bytes:
    agent = agent_pb.Agent(id="x", provider="scripted", cwd=cwd, title="round trip")
    out = export_jsonl.header_line(agent, len(rows))
    for seq, row in enumerate(rows, start=1):
        out += export_jsonl.row_line("e", row_to_pb(row._replace(seq=seq)))
    return out + export_jsonl.end_line(len(rows))


def imported(stubs: SyncStubs, data: bytes) -> str:
    request = svc_pb.ImportAgentExportRequest(data=data)
    return str(stubs.agents.ImportAgentExport(iter([request])).agent.id)


def exported(stubs: SyncStubs, agent_id: str) -> bytes:
    call = stubs.agents.ExportAgent(svc_pb.ExportAgentRequest(agent_id=agent_id))
    return b"".join(chunk.data for chunk in call)


def without_ids_and_times(data: bytes) -> list[Any]:
    header, *rest = (json.loads(line) for line in data.splitlines())
    agent = header["agent"]
    for key in ("id", "provider_session_id", "created_at", "updated_at", "timeline"):
        agent.pop(key, None)
    return [header, *({k: v for k, v in r.items() if k != "epoch"} for r in rest)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS)
def test_export_import_export_gives_the_same_file_but_ids_and_times(
    stubs: SyncStubs, tmp_path_factory: pytest.TempPathFactory, rows: list[dt.TimelineRow]
) -> None:
    cwd = str(Path(tmp_path_factory.getbasetemp()))
    first = exported(stubs, imported(stubs, file_of(rows, cwd)))
    second = exported(stubs, imported(stubs, first))
    assert without_ids_and_times(second) == without_ids_and_times(first)
    assert len(first.splitlines()) == len(rows) + 2
