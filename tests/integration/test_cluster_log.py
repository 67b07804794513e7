"""The cluster's event log on three real NATS servers (R3 stream): order, fencing, dedupe."""

from __future__ import annotations

import asyncio
import itertools

import nats.aio.client
import pytest

from corral_server.cluster.log import Appended, EventLog, Fenced, batch_id

_streams = itertools.count()


async def fresh_log(client: nats.aio.client.Client) -> EventLog:
    """A stream of the test's own (streams may not share subjects)."""
    number = next(_streams)
    return await EventLog.open(client.jetstream(), name=f"LOG{number}", prefix=f"t{number}.events.")


async def test_batches_read_back_in_stream_order_with_their_events(
    nats_client: nats.aio.client.Client,
) -> None:
    log = await fresh_log(nats_client)
    a = await log.append("a", [b"a1", b"a2"], expected=0, msg_id="a:0")
    b = await log.append("b", [b"b1"], expected=0, msg_id="b:0")
    a2 = await log.append("a", [b"a3", b"", b"x" * 300], expected=a.sequence, msg_id="a:1")
    batches = await log.read(1)
    assert [(x.sequence, x.agent, x.events) for x in batches] == [
        (a.sequence, "a", (b"a1", b"a2")),
        (b.sequence, "b", (b"b1",)),
        (a2.sequence, "a", (b"a3", b"", b"x" * 300)),
    ]
    assert [x.sequence for x in await log.read(b.sequence)] == [b.sequence, a2.sequence]
    assert await log.read(a2.sequence + 1) == []
    assert await log.last_sequence("a") == a2.sequence
    assert await log.last_sequence("nobody") == 0


async def test_the_incarnation_names_the_streams_creation(
    nats_client: nats.aio.client.Client,
) -> None:
    log = await fresh_log(nats_client)
    again = await EventLog.open(nats_client.jetstream(), name=log.name, prefix=log.prefix)
    assert again.incarnation == log.incarnation
    await nats_client.jetstream().delete_stream(log.name)
    remade = await EventLog.open(nats_client.jetstream(), name=log.name, prefix=log.prefix)
    assert remade.incarnation != log.incarnation
    assert remade.incarnation.startswith(log.name + "@")


async def test_a_writer_whose_expected_sequence_is_stale_is_fenced_and_appends_nothing(
    nats_client: nats.aio.client.Client,
) -> None:
    log = await fresh_log(nats_client)
    first = await log.append("a", [b"old owner"], expected=0, msg_id=batch_id("a", "n1", 0))
    # A new owner takes the agent over; the old one still believes `first` is the end.
    claimed = await log.claim("a", "n2/7")
    with pytest.raises(Fenced) as refused:
        await log.append(
            "a", [b"one more"], expected=first.sequence, msg_id=batch_id("a", "n1", first.sequence)
        )
    assert refused.value.agent == "a"
    assert refused.value.expected == first.sequence
    mine = await log.append("a", [b"new owner"], expected=claimed, msg_id=batch_id("a", "n2", 7))
    batches = await log.read(1)
    assert [(x.events, x.owner) for x in batches] == [
        ((b"old owner",), None),
        ((), "n2/7"),
        ((b"new owner",), None),
    ]
    assert batches[-1].sequence == mine.sequence


async def test_two_writers_racing_for_one_position_store_one_batch(
    nats_client: nats.aio.client.Client,
) -> None:
    log = await fresh_log(nats_client)
    await log.append("a", [b"winner"], expected=0, msg_id=batch_id("a", "n1", 0))
    with pytest.raises(Fenced):
        await log.append("a", [b"loser"], expected=0, msg_id=batch_id("a", "n2", 0))
    assert [x.events for x in await log.read(1)] == [(b"winner",)]


async def test_a_retried_append_is_stored_once(nats_client: nats.aio.client.Client) -> None:
    log = await fresh_log(nats_client)
    first = await log.append("a", [b"e1"], expected=0, msg_id="a:n1:0")
    retry = await log.append("a", [b"e1"], expected=0, msg_id="a:n1:0")
    assert (first.duplicate, retry.duplicate) == (False, True)
    assert retry.sequence == first.sequence
    assert [x.events for x in await log.read(1)] == [(b"e1",)]


async def test_a_retry_after_the_duplicate_window_is_known_as_stored(
    nats_client: nats.aio.client.Client,
) -> None:
    """The server has forgotten the retry's id (its window passed) and the retry's expectation
    is stale (its own first try moved the subject on): the look-up after the refusal finds the
    first try's message, so the retry is a duplicate, not a fence and not a second copy."""
    js = nats_client.jetstream()
    log = await EventLog.open(js, name="LOGWINDOW", prefix="window.events.", duplicate_window_s=0.1)
    first = await log.append("a", [b"e1"], expected=0, msg_id="a:n1:0")
    await log.append("a", [b"e2"], expected=first.sequence, msg_id="a:n1:1")
    probe = {"Nats-Msg-Id": "probe"}
    await js.publish("window.events.probe", b"", headers=probe)
    deadline = asyncio.get_running_loop().time() + 30
    # The probe was stored after "a:n1:0": once the server stores the probe again, it has
    # forgotten both ids.
    while (await js.publish("window.events.probe", b"", headers=probe)).duplicate:
        assert asyncio.get_running_loop().time() < deadline, "the window never passed"
        await asyncio.sleep(0.02)
    retry = await log.append("a", [b"e1"], expected=0, msg_id="a:n1:0")
    assert retry == Appended(first.sequence, duplicate=True)
    assert [x.events for x in await log.read(1) if x.agent == "a"] == [(b"e1",), (b"e2",)]


async def test_one_id_reused_for_another_batch_drops_that_batch(
    nats_client: nats.aio.client.Client,
) -> None:
    """Why ids must be unique per batch: the server acknowledges the second as a duplicate."""
    log = await fresh_log(nats_client)
    await log.append("a", [b"e1"], expected=0, msg_id="same")
    second = await log.append("b", [b"other"], expected=0, msg_id="same")
    assert second.duplicate
    assert [x.events for x in await log.read(1)] == [(b"e1",)]
