"""InMemoryTimelineStore beyond the shared contract (test_store_contract.py): its list
compaction."""

from __future__ import annotations

from corral_server.domain.timeline import Cursor, Direction, UserMessage
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import NewRow
from tests.support.stores import counting_epochs

AGENT = "agent-1"
EPOCH = "epoch-1"


def new_row(n: int) -> NewRow:
    return NewRow(UserMessage(f"m{n}"), timestamp_ms=1000 + n, turn_id=f"t{n}")


async def test_retention_stays_exact_across_many_compactions() -> None:
    # Thousands of single-row appends cross the store's compaction threshold many times.
    store = InMemoryTimelineStore(retain_rows=7, epoch_factory=counting_epochs())
    await store.create(AGENT)
    for n in range(1, 5001):
        await store.append(AGENT, [new_row(n)])
    tail = await store.fetch(AGENT, Direction.TAIL, None, 0)
    assert [row.item for row in tail.rows] == [UserMessage(f"m{n}") for n in range(4994, 5001)]
    before = await store.fetch(AGENT, Direction.BEFORE, Cursor(EPOCH, 4997), 2)
    assert [row.seq for row in before.rows] == [4995, 4996]
    assert [row.item for row in before.rows] == [UserMessage("m4995"), UserMessage("m4996")]
