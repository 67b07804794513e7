"""A fork copies a tool output kept apart from its row with the row (docs/design.md#forks):
the fork's row names a blob of its own, FetchToolOutput pages the whole of it from the fork,
and the source's stays as it was (in memory and on a state directory)."""

from __future__ import annotations

from pathlib import Path

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_pb2 as timeline_pb
from tests.integration.test_tool_output import (
    agent_after,
    blob_ids,
    daemon,
    expected_output,
    fetch_all,
    stubs,
)
from tests.support.client import SyncStubs

__all__ = ["daemon", "stubs"]  # the fixtures, shared

SIZE = 300_000  # over the 256 KiB a row keeps inline


def test_a_fork_keeps_a_large_tool_output_of_its_own(stubs: SyncStubs, tmp_path: Path) -> None:
    source = agent_after(stubs, tmp_path, f"/tool-output shell {SIZE}")
    agent = stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=source)).agent
    whole = timeline_pb.Cursor(epoch=agent.timeline.epoch, seq=agent.timeline.next_seq)
    forked = stubs.agents.ForkAgent(svc_pb.ForkAgentRequest(agent_id=source, cursor=whole))
    (source_blob,) = blob_ids(stubs, source)
    (fork_blob,) = blob_ids(stubs, forked.agent.id)
    assert fork_blob != source_blob
    assert fetch_all(stubs, forked.agent.id, fork_blob) == expected_output(SIZE)
    assert fetch_all(stubs, source, source_blob) == expected_output(SIZE)
