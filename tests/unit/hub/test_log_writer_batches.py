"""The log writer keeps what waits for the log a batch (an `append`) at a time, and still hands
`on_durable` exactly what the log has committed, in order, each entry once: also when the log's
head lands inside a batch (a log is free to commit in other pieces than it was handed)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from corral_server.clock import FakeClock
from corral_server.hub.log_writer import LogWriter
from corral_server.records import InMemoryEventLog, LogEntry


class PieceLog(InMemoryEventLog):
    """Commits `commit(n)` entries of what it was handed, then resolves the futures of the
    appends it has committed whole."""

    def __init__(self) -> None:
        super().__init__(mint=lambda: "pieces")
        self.handed: list[LogEntry] = []
        self.futures: list[tuple[int, asyncio.Future[None]]] = []  # (last revision, future)
        self._next_revision = 1

    @property
    def next_revision(self) -> int:
        return self._next_revision

    def append_many(self, batch: Sequence[LogEntry]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.handed.extend(batch)
        self.futures.append((batch[-1].revision, future))
        self._next_revision = batch[-1].revision + 1
        return future

    def commit(self, count: int) -> None:
        piece, self.handed = self.handed[:count], self.handed[count:]
        super().append_many(piece)
        while self.futures and self.futures[0][0] <= self.head_revision:
            self.futures.pop(0)[1].set_result(None)


async def test_a_head_inside_a_batch_publishes_up_to_it_and_the_rest_later() -> None:
    log = PieceLog()
    published: list[list[int]] = []
    writer = LogWriter(log, FakeClock(), lambda entries: published.append([e[0] for e in entries]))
    writer.append([("a", b"1"), ("a", b"2")])
    writer.append([("a", b"3"), ("a", b"4"), ("a", b"5")])
    log.commit(3)  # the first append whole, and one entry of the second
    await asyncio.sleep(0)
    assert published == [[1, 2, 3]]
    assert writer.pending == 2
    writer.append([("a", b"6")])
    log.commit(2)
    await asyncio.sleep(0)
    assert published == [[1, 2, 3], [4, 5]]
    log.commit(1)
    await asyncio.sleep(0)
    assert published == [[1, 2, 3], [4, 5], [6]]
    assert writer.pending == 0
