"""The follower goes on when the stream does not answer a read (an election, a node cut off
from NATS for a moment): it reads again from its position instead of stopping the read model
for good. A failure of the read model itself still stops it. Without a server: the log is a
stand-in that answers as JetStream does during an election."""

from __future__ import annotations

import asyncio
from typing import cast

import nats.errors
import nats.js.errors
import pytest

from corral_server.cluster import follower as follower_module
from corral_server.cluster.follower import Follower
from corral_server.cluster.log import Batch, EventLog


class ElectingLog:
    """No consumer can be made (no meta leader); the leader's reads time out `timeouts`
    times, then answer what the stream holds."""

    prefix = "corral.events."

    def __init__(self, batches: list[Batch], timeouts: int) -> None:
        self.batches, self.timeouts = batches, timeouts
        self.reads = 0
        self._reads_seen = -1

    def reads_done(self) -> bool:
        """True once no read came since the last call (the follower stopped reading)."""
        seen, self._reads_seen = self._reads_seen, self.reads
        return seen == self.reads

    async def consumer(self, start: int) -> None:
        raise nats.js.errors.ServiceUnavailableError

    async def read(self, start: int, limit: int = 1000) -> list[Batch]:
        self.reads += 1
        if self.timeouts:
            self.timeouts -= 1
            raise nats.errors.TimeoutError
        return [b for b in self.batches if b.sequence >= start][:limit]


def _batch(sequence: int) -> Batch:
    return Batch(sequence, "a1", (b"event",), None)


async def test_a_read_the_stream_does_not_answer_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(follower_module, "QUIET_S", 0.0)
    stream = ElectingLog([_batch(1), _batch(2)], timeouts=3)
    applied: list[int] = []

    def apply(batch: Batch) -> asyncio.Future[None]:
        applied.append(batch.sequence)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    follower = Follower(cast(EventLog, stream), apply, position=0)
    await follower.start()
    try:
        await asyncio.wait_for(follower.applied(2), 5)
        assert applied == [1, 2]
        assert stream.reads > 3 and follower.failure is None
        assert follower.unanswered == 0  # counted during the outage, cleared by a read
    finally:
        await follower.stop()


async def test_a_read_model_that_failed_is_not_followed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(follower_module, "QUIET_S", 0.0)
    stream = ElectingLog([_batch(1), _batch(2)], timeouts=0)
    broken = OSError("disk I/O error")

    def apply(batch: Batch) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_exception(broken)
        return done

    stopped: list[bool] = []
    follower = Follower(cast(EventLog, stream), apply, position=0)
    follower.on_failed = lambda: stopped.append(True)
    await follower.start()
    try:
        with pytest.raises(OSError, match="disk I/O error"):
            await asyncio.wait_for(follower.applied(2), 5)
        assert follower.failure is broken and stopped == [True]
        for _ in range(100):  # the loop notices at its next round, and stops reading
            if stream.reads_done():
                break
            await asyncio.sleep(0)
        assert stream.reads_done()
    finally:
        await follower.stop()
