"""The stream book without grpc (rpc/streams.py), on a FakeClock: credits grow only as a
client reads, the active total makes writes wait and lets them go in order, slow writes leave
it, streams that have not shown they read are capped together, stalls end streams, and the
count of streams is bounded."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.clock import FakeClock
from corral_server.errors import StreamLimit
from corral_server.rpc.streams import SLOW_S, Stream, StreamBook, StreamLimits

KiB = 1 << 10
MAX_CREDIT = 1 << 20


def book(**kw: float) -> tuple[StreamBook, FakeClock, list[Stream]]:
    clock = FakeClock()
    stalled: list[Stream] = []
    limits = StreamLimits(**kw)  # type: ignore[arg-type]
    return StreamBook(limits, clock), clock, stalled


def opened(streams: StreamBook, stalled: list[Stream]) -> Stream:
    holder: list[Stream] = []
    stream = streams.open(lambda: stalled.append(holder[0]))
    holder.append(stream)
    return stream


async def test_a_credit_doubles_only_with_batches_of_at_least_half_of_it() -> None:
    streams, _, stalled = book()
    stream = opened(streams, stalled)
    assert stream.credit == 16 * KiB
    assert await stream.write(100)
    assert stream.written(MAX_CREDIT) == 16 * KiB  # a small batch proves nothing
    for expected in (32, 64, 128, 256, 512, 1024, 1024):
        assert await stream.write(stream.credit)
        assert stream.written(MAX_CREDIT) == expected * KiB


async def test_writes_past_the_total_wait_and_go_in_order_as_room_frees() -> None:
    streams, _, stalled = book(total_bytes=100 * KiB)
    first, second, third = (opened(streams, stalled) for _ in range(3))
    assert await first.write(60 * KiB)
    for stream in (second, third):  # 60 + 10 + 10 fit: granted at once
        assert await stream.write(10 * KiB)
    assert streams.active_bytes == 80 * KiB
    big = opened(streams, stalled)
    pending = asyncio.ensure_future(big.write(50 * KiB))
    await asyncio.sleep(0)
    assert not pending.done()  # 80 + 50 > 100
    first.written(MAX_CREDIT)
    await asyncio.sleep(0)
    assert pending.done() and pending.result()
    assert streams.active_bytes == 70 * KiB


async def test_a_batch_larger_than_the_whole_total_goes_alone() -> None:
    streams, _, stalled = book(total_bytes=10 * KiB)
    stream = opened(streams, stalled)
    assert await stream.write(50 * KiB)
    assert streams.active_bytes == 50 * KiB


async def test_a_write_pending_past_slow_s_leaves_the_active_total_for_the_slow_one() -> None:
    streams, clock, stalled = book(total_bytes=100 * KiB)
    hostile = opened(streams, stalled)
    assert await hostile.write(90 * KiB)
    reader = opened(streams, stalled)
    waiting = asyncio.ensure_future(reader.write(20 * KiB))
    await asyncio.sleep(0)
    assert not waiting.done()
    await clock.advance(int(SLOW_S * 1000) + 600)
    assert waiting.done() and waiting.result()
    assert (streams.active_bytes, streams.slow_bytes) == (20 * KiB, 90 * KiB)
    hostile.written(MAX_CREDIT)  # it read after all
    assert streams.slow_bytes == 0


async def test_large_batches_of_streams_that_never_read_are_capped_together() -> None:
    streams, clock, stalled = book(total_bytes=100 * KiB)
    hostile = [opened(streams, stalled) for _ in range(3)]
    for stream in hostile[:2]:
        assert await stream.write(90 * KiB)
        await clock.advance(int(SLOW_S * 1000) + 600)  # slow: out of the active total
    assert streams.slow_bytes == 180 * KiB
    third = asyncio.ensure_future(hostile[2].write(90 * KiB))
    await asyncio.sleep(0)
    assert not third.done()  # 180 + 90 > 2 x 100: held for clients that do not read
    # A small batch, or a stream that has shown it reads, still goes.
    small = opened(streams, stalled)
    assert await small.write(4 * KiB)
    reader = opened(streams, stalled)
    reader.credit = 64 * KiB
    assert await reader.write(64 * KiB)


async def test_a_stream_pending_or_waiting_for_stall_s_is_stalled_once() -> None:
    streams, clock, stalled = book(total_bytes=100 * KiB, stall_s=5.0)
    pending = opened(streams, stalled)
    assert await pending.write(100 * KiB)
    waiting = opened(streams, stalled)
    wait = asyncio.ensure_future(waiting.write(150 * KiB))
    await clock.advance(4_000)
    assert stalled == [] and not wait.done()
    await clock.advance(2_000)
    assert stalled == [pending, waiting] and streams.stalls == 2
    assert wait.done() and wait.result() is False  # its batch is dropped
    await clock.advance(10_000)
    assert streams.stalls == 2
    # What a stalled stream writes next (its StreamEnding) goes at once, counted as slow.
    assert await waiting.write(50)
    assert streams.slow_bytes >= 50
    for stream in (pending, waiting):
        stream.close()
    assert (streams.active_bytes, streams.slow_bytes, streams.open_streams) == (0, 0, 0)


async def test_streams_past_max_streams_are_refused_and_a_closed_one_frees_its_place() -> None:
    streams, _, stalled = book(max_streams=2)
    first, _second = opened(streams, stalled), opened(streams, stalled)
    with pytest.raises(StreamLimit) as refused:
        opened(streams, stalled)
    assert refused.value.reason == "STREAM_LIMIT"
    assert refused.value.metadata == {"max_streams": "2"}
    first.close()
    opened(streams, stalled)


async def test_a_call_that_goes_away_while_waiting_gives_its_place_back() -> None:
    streams, _, stalled = book(total_bytes=10 * KiB)
    holder = opened(streams, stalled)
    assert await holder.write(10 * KiB)
    gone = opened(streams, stalled)
    wait = asyncio.ensure_future(gone.write(5 * KiB))
    await asyncio.sleep(0)
    wait.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait
    gone.close()
    after = opened(streams, stalled)
    later = asyncio.ensure_future(after.write(5 * KiB))
    holder.written(MAX_CREDIT)
    assert await later
    assert streams.active_bytes == 5 * KiB
