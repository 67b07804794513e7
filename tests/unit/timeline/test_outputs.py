"""The in-memory store's tool outputs: readable while their row is retained in the current
epoch, taken over by a rewind's copy, dropped with retention, and bounded in total."""

from __future__ import annotations

import pytest

from corral_server.domain.timeline import OutputRef, ToolCall, ToolCallStatus
from corral_server.errors import InvalidArgument, ToolOutputNotFound
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.outputs import MemoryOutputs
from corral_server.timeline.store import NewRow


def kept_row(blob_id: str, data: bytes | None) -> NewRow:
    ref = OutputRef(blob_id, len(data or b""))
    call = ToolCall("c", "shell", ToolCallStatus.COMPLETED, output="preview", output_ref=ref)
    return NewRow(call, 0, output=data)


async def test_an_output_reads_in_chunks_and_an_offset_past_its_end_is_refused() -> None:
    store = InMemoryTimelineStore()
    await store.create("a")
    await store.append("a", [kept_row("b1", b"0123456789")])
    chunk = await store.read_output("a", "b1", 4, 3)
    assert (chunk.data, chunk.offset, chunk.size_bytes) == (b"456", 4, 10)
    assert (await store.read_output("a", "b1", 10, 3)).data == b""
    with pytest.raises(InvalidArgument):
        await store.read_output("a", "b1", 11, 3)
    await store.create("other")
    with pytest.raises(ToolOutputNotFound):  # another agent's output
        await store.read_output("other", "b1", 0, 3)


async def test_retention_drops_the_output_with_its_row() -> None:
    store = InMemoryTimelineStore(retain_rows=1)
    await store.create("a")
    await store.append("a", [kept_row("b1", b"x" * 10)])
    await store.append("a", [NewRow(ToolCall("d", "t", ToolCallStatus.COMPLETED), 0)])
    with pytest.raises(ToolOutputNotFound):
        await store.read_output("a", "b1", 0, 1)


async def test_a_rebase_hides_the_output_until_a_copy_of_its_row_takes_it_over() -> None:
    store = InMemoryTimelineStore()
    await store.create("a")
    await store.append("a", [kept_row("kept", b"k" * 10), kept_row("gone", b"g" * 10)])
    await store.rebase("a")
    with pytest.raises(ToolOutputNotFound):
        await store.read_output("a", "kept", 0, 1)
    await store.append("a", [kept_row("kept", None)])  # a rewind's copy: no bytes
    assert (await store.read_output("a", "kept", 0, 10)).data == b"k" * 10
    with pytest.raises(ToolOutputNotFound):
        await store.read_output("a", "gone", 0, 1)


def test_past_the_total_bound_the_oldest_outputs_are_evicted() -> None:
    outputs = MemoryOutputs(max_total_bytes=25)
    for name in ("one", "two", "three"):
        outputs.put("a", "e", 1, name, b"x" * 10, False)
    window = ("e", 1, 2)
    with pytest.raises(ToolOutputNotFound):
        outputs.read("a", "one", window, 0, 1)
    assert outputs.read("a", "three", window, 0, 10).size_bytes == 10
    outputs.sweep("a", None)
    with pytest.raises(ToolOutputNotFound):
        outputs.read("a", "three", window, 0, 1)
