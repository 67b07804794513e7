"""EventService at the rpc edge: Subscribe streams the hub's framed batches; Heartbeat records
presence.

Subscribe is registered through a generic handler with an identity response serializer: the
hub already holds each event's serialized, framed bytes, and a batch (the join of its frames)
*is* a serialized SubscribeResponse, so nothing is encoded per subscriber here.

Each Subscribe is a stream of rpc/streams.py's book: its batches are no bigger than the
stream's credit, wait for room in the daemon's total, and a client that stops reading for the
book's stall_s has its subscription ended by the hub (StreamEnding with its resume point, after
the batch it has not read).

Must not: hold protobuf messages per event, or keep a subscription open after its call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable

import grpc
from google.protobuf import timestamp_pb2

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.clock import Clock, SystemClock
from corral_server.errors import FieldViolation, InvalidArgument, Unimplemented
from corral_server.hub import EventHub, SnapshotFn, Subscription
from corral_server.manager.presence import Presence, PresenceBook
from corral_server.rpc.errors import streaming, unary
from corral_server.rpc.projected_stream import AgentFetch, ProjectedStream
from corral_server.rpc.streams import StreamBook

SERVICE_NAME = "corral.v1.EventService"

# Presence entries kept (oldest heartbeat evicted first), so hostile client ids cannot grow
# the table without bound.
MAX_PRESENCE_ENTRIES = 10_000
MAX_CLIENT_ID_CHARS = 256

# Ids one subscription may name (empty = every agent, which needs none): a client watching more
# agents than this subscribes to all of them. Checked on the request before any set is built:
# 400 k ids cost 65-200 MB per stream (measured).
MAX_SUBSCRIBE_AGENT_IDS = 1_000
# An agent id is 32 hex characters; this is the manager's default `Limits.max_id_chars`.
MAX_AGENT_ID_CHARS = 256

# google.protobuf.Timestamp's valid range (0001-01-01 .. 9999-12-31, UTC).
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799


def _valid_timestamp(ts: timestamp_pb2.Timestamp) -> bool:
    return _MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos <= 999_999_999


def _identity(data: bytes) -> bytes:
    return data


class EventServicer:
    def __init__(
        self,
        hub: EventHub,
        snapshot: SnapshotFn,
        *,
        max_id_chars: int = MAX_AGENT_ID_CHARS,
        presence: PresenceBook | None = None,
        clock: Clock | None = None,
        streams: StreamBook | None = None,
        fetch_timeline: AgentFetch | None = None,
        resume_wait_s: float = 0.0,
    ) -> None:
        self._hub = hub
        # A cluster node: how long a resume ahead of this node's head waits for the node to
        # apply it (it is a lag there, not another log) before the reset a daemon answers.
        self._resume_wait_s = resume_wait_s
        # Reads stored rows for projected streams (None: PROJECTED is UNIMPLEMENTED).
        self._fetch_timeline = fetch_timeline
        self._streams = streams or StreamBook(clock=clock)
        self._snapshot = snapshot
        self._max_id_chars = max_id_chars
        # Each client's last heartbeat (the manager's, so attention events can use it).
        self.presence_book = presence or PresenceBook(MAX_PRESENCE_ENTRIES)
        self._clock: Clock = clock or SystemClock()

    @property
    def presence(self) -> dict[str, Presence]:
        return self.presence_book.clients

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Subscribe": grpc.unary_stream_rpc_method_handler(
                    self.subscribe,
                    request_deserializer=event_pb.SubscribeRequest.FromString,
                    response_serializer=_identity,
                ),
                "Heartbeat": grpc.unary_unary_rpc_method_handler(
                    self.heartbeat,
                    request_deserializer=event_pb.HeartbeatRequest.FromString,
                    response_serializer=event_pb.HeartbeatResponse.SerializeToString,
                ),
            },
        )

    @streaming
    async def subscribe(
        self,
        request: event_pb.SubscribeRequest,
        context: grpc.aio.ServicerContext[event_pb.SubscribeRequest, bytes],
    ) -> AsyncIterator[bytes]:
        """Yields serialized SubscribeResponse payloads, one framed batch each."""
        if len(request.agent_ids) > MAX_SUBSCRIBE_AGENT_IDS:
            raise InvalidArgument.field(
                "agent_ids",
                f"at most {MAX_SUBSCRIBE_AGENT_IDS} ids (subscribe with none to see every agent)",
            )
        violations = _scope_violations(request.agent_ids, self._max_id_chars)
        if violations:
            raise InvalidArgument("invalid agent_ids", *violations)
        resume = request.resume_revision if request.HasField("resume_revision") else None
        projected = self._projected(request.view)
        hub = self._hub
        if resume is not None and resume > hub.head_revision:
            await self._caught_up(resume, request.resume_incarnation)
        subscription: Subscription | None = None
        reason = f"the client did not read for {self._streams.limits.stall_s:g} s"

        def stalled() -> None:
            if subscription is not None:
                hub.end_one(subscription, reason)

        stream = self._streams.open(stalled)
        try:
            subscription = hub.subscribe(
                frozenset(request.agent_ids),
                resume,
                self._snapshot,
                resume_incarnation=request.resume_incarnation,
            )
            subscription.batch_bytes = stream.credit
            # The context manager closes the subscription however the call ends: the client
            # cancels (CancelledError at the yield or inside the subscription's wait), the
            # deadline passes, or the hub ends the stream.
            async with subscription:
                async for batch in subscription:
                    if projected is not None:
                        batch = await projected.batch(batch)
                    if not await stream.write(len(batch)):
                        continue  # it stalled waiting for room: the ending comes next
                    yield batch  # returns once grpc wrote it within the client's window
                    subscription.batch_bytes = stream.written(hub.batch_bytes)
        finally:
            stream.close()

    async def _caught_up(self, resume: int, incarnation: str) -> None:
        """Wait (a cluster node only, and at most `resume_wait_s`) for the head to reach a
        resume point of this log that is ahead of it."""
        hub = self._hub
        if self._resume_wait_s > 0 and incarnation in ("", hub.incarnation):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hub.head_reached(resume), self._resume_wait_s)

    def _projected(self, view: int) -> ProjectedStream | None:
        if view not in timeline_pb.TimelineView.values():
            raise InvalidArgument.field("view", f"unknown value {view}")
        if view != timeline_pb.TIMELINE_VIEW_PROJECTED:
            return None
        if self._fetch_timeline is None:
            raise Unimplemented("this EventService has no timeline to project")
        return ProjectedStream(self._fetch_timeline)

    @unary
    async def heartbeat(
        self,
        request: event_pb.HeartbeatRequest,
        context: grpc.aio.ServicerContext[event_pb.HeartbeatRequest, event_pb.HeartbeatResponse],
    ) -> event_pb.HeartbeatResponse:
        if not request.client_id:
            raise InvalidArgument.field("client_id", "must not be empty")
        if len(request.client_id) > MAX_CLIENT_ID_CHARS:
            raise InvalidArgument.field("client_id", f"at most {MAX_CLIENT_ID_CHARS} chars")
        if request.HasField("last_activity_at") and not _valid_timestamp(request.last_activity_at):
            raise InvalidArgument.field(
                "last_activity_at", "outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z"
            )
        active_at_ms = (
            request.last_activity_at.ToMilliseconds()
            if request.HasField("last_activity_at")
            else self._clock.now_ms()
        )
        presence = Presence(
            request.client_type, request.focused_agent_id, request.app_visible, active_at_ms
        )
        self.presence_book.record(request.client_id, presence)
        return event_pb.HeartbeatResponse()


def _scope_violations(agent_ids: Iterable[str], max_chars: int) -> list[FieldViolation]:
    """agent_ids must be non-empty strings of at most `max_chars` without duplicates (unknown
    ids are fine: a client may subscribe before the agent exists)."""
    violations: list[FieldViolation] = []
    seen: set[str] = set()
    for index, agent_id in enumerate(agent_ids):
        name = f"agent_ids[{index}]"
        if not agent_id:
            violations.append(FieldViolation(name, "must not be empty"))
        elif len(agent_id) > max_chars:
            violations.append(FieldViolation(name, f"at most {max_chars} chars"))
        elif agent_id in seen:
            violations.append(FieldViolation(name, f"duplicate agent id {agent_id!r}"))
        seen.add(agent_id)
    return violations
