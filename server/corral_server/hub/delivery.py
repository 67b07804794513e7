"""What a subscription's reader is handed next, and how a subscription ends (the hub's `Feed`).

A reader's next batch comes, in this order, from: its prefix (snapshot entries and controls,
encoded lazily, batch by batch), its buffer (once released while LIVE; at once otherwise), a
catch-up step (CATCHING_UP: catch_up.py), or, once ENDED, its StreamEnding frame.

Owns the reader's side of a subscription: taking its prefix and its buffer (and `held`,
`released`, `delivered` with them), its ENDED state and its `ending`, and closing it. Must
not: publish, or move a subscription between LIVE and CATCHING_UP (catch_up.py does).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import assert_never

from corral_server.domain.events import Event, StreamControl, StreamEnding
from corral_server.hub.catch_up import CatchUp
from corral_server.hub.index import SubscriptionIndex
from corral_server.hub.ring import StreamFormat, take_batch
from corral_server.hub.subscription import FromLog, Subscription, SubscriptionState


class Delivery:
    __slots__ = ("_catch_up", "_form", "_index")

    def __init__(self, index: SubscriptionIndex, catch_up: CatchUp, form: StreamFormat) -> None:
        self._index = index
        self._catch_up = catch_up
        self._form = form

    # --- the Feed a subscription reads -----------------------------------------------------

    def next_batch(self, sub: Subscription) -> bytes | FromLog | None:
        if sub.prefix is not None:
            data = self._take_prefix(sub, sub.prefix)
            if data:
                return data
            sub.prefix = None
        if sub.buffer and (sub.released or sub.state is not SubscriptionState.LIVE):
            return self._take_buffer(sub)
        match sub.state:
            case SubscriptionState.LIVE:
                return None
            case SubscriptionState.CATCHING_UP:
                return self._catch_up.step(sub)
            case SubscriptionState.ENDED:
                ending, sub.ending = sub.ending, None
                return ending
            case _ as unreachable:
                assert_never(unreachable)

    async def next_batch_from_log(self, sub: Subscription) -> bytes:
        return await self._catch_up.step_from_log(sub)

    def close(self, sub: Subscription) -> None:
        if sub.state is SubscriptionState.LIVE:
            self._index.leave_live(sub)
        self._index.remove(sub)
        sub.state = SubscriptionState.ENDED
        sub.prefix = None
        sub.held = None
        sub.buffer = []
        sub.ending = None

    def _take_prefix(self, sub: Subscription, prefix: Iterator[Event | StreamControl]) -> bytes:
        held, sub.held = sub.held, None
        frames: list[bytes] = [] if held is None else [held]
        size = 0 if held is None else len(held)
        control = self._form.control
        for item in islice(prefix, self._form.batch_events - len(frames)):
            framed = control(item)
            if frames and size + len(framed) > sub.batch_bytes:
                sub.held = framed
                break
            frames.append(framed)
            size += len(framed)
        return b"".join(frames)

    def _take_buffer(self, sub: Subscription) -> bytes:
        buffer = sub.buffer
        batch, data = take_batch(buffer, self._form.batch_events, sub.batch_bytes)
        if len(batch) == len(buffer):
            sub.buffer = []
            sub.released = False
        else:
            del buffer[: len(batch)]
        sub.delivered = batch[-1][0]
        return data

    # --- ending ----------------------------------------------------------------------------

    def end(self, sub: Subscription, reason: str, head: int, *, drain: bool) -> None:
        """End `sub` with StreamEnding(resume revision, reason). `drain`: after what it was
        given. Else now (its client stopped reading): what its reader has not taken is
        dropped, and the resume revision is the one up to which it was given every matching
        event, or 0 when part of its snapshot was dropped (a resume from 0 replays or resets:
        it never skips an event). `head`: the hub's head revision."""
        match sub.state:
            case SubscriptionState.LIVE:
                self._index.leave_live(sub)
                resume = head
            case SubscriptionState.CATCHING_UP:
                resume = sub.position
            case SubscriptionState.ENDED:
                return
            case _ as unreachable:
                assert_never(unreachable)
        if not drain:
            if sub.buffer:
                resume = sub.buffer[0][0] - 1
            if _drop_pending(sub):
                resume = 0
        sub.state = SubscriptionState.ENDED
        sub.ending = self._form.control(StreamEnding(resume, reason, self._form.incarnation))
        sub.wake()


def _drop_pending(sub: Subscription) -> bool:
    """Drop what the reader has not taken yet (prefix, buffer, read-ahead), for an end that
    does not drain; True when part of the prefix was dropped."""
    # An exhausted prefix stays set until the reader's next step: look for one more item.
    prefix = sub.prefix
    dropped_prefix = sub.held is not None or (prefix is not None and next(prefix, None) is not None)
    sub.prefix = None
    sub.held = None
    sub.buffer = []
    sub.released = False
    sub.ahead = []
    return dropped_prefix
