"""A Subscribe stream in the projected view (docs/design.md#projections): each
`timeline_row_appended` becomes `timeline_entry_upserted`, the entry that row made or changed,
with the same revision. Everything else passes as it is.

Works on the hub's batches as they are sent, so the hub and every raw subscriber are untouched:
a projected stream decodes its batches, keeps one live projector per agent it has seen rows
of, and encodes the result. Rows come in seq order per agent; a projector that misses a row (a
reset, a resumed stream, the first row it sees) is seeded again from the stored rows, so an
update is always the entry the whole timeline would give.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from corral.v1 import event_service_pb2 as event_pb
from corral_server.domain.timeline import Cursor, Direction, FetchResult, TimelineRow
from corral_server.errors import CorralError
from corral_server.rpc.items import row_from_pb
from corral_server.rpc.projection_codec import entry_upserted
from corral_server.timeline.projected_pages import live_seed
from corral_server.timeline.projection import Projector, TimelineEntry

AgentFetch = Callable[[str, Direction, Cursor | None, int | None], Awaitable[FetchResult]]


@dataclass(slots=True)
class _Live:
    epoch: str
    next_seq: int
    projector: Projector


class ProjectedStream:
    """One projected subscriber's projectors, by agent. Not shared between streams."""

    def __init__(self, fetch: AgentFetch) -> None:
        self._fetch = fetch
        self._live: dict[str, _Live] = {}

    async def batch(self, data: bytes) -> bytes:
        """A serialized SubscribeResponse in, its projected form out."""
        response = event_pb.SubscribeResponse.FromString(data)
        out = event_pb.SubscribeResponse()
        for event in response.events:
            kind = event.WhichOneof("payload")
            if kind == "timeline_row_appended":
                appended = event.timeline_row_appended
                row = row_from_pb(appended.row)
                entry = await self._entry(appended.agent_id, appended.epoch, row)
                agent_id, epoch = appended.agent_id, appended.epoch
                out.events.append(entry_upserted(event.revision, agent_id, epoch, entry, row.seq))
                continue
            if kind == "timeline_reset":
                self._live.pop(event.timeline_reset.agent_id, None)
            elif kind == "agent_removed":
                self._live.pop(event.agent_removed.agent_id, None)
            elif kind == "subscription_reset":
                self._live.clear()
            out.events.append(event)
        return out.SerializeToString()

    async def _entry(self, agent_id: str, epoch: str, row: TimelineRow) -> TimelineEntry:
        live = self._live.get(agent_id)
        if live is None or live.epoch != epoch or live.next_seq != row.seq:
            live = _Live(epoch, row.seq, await self._seeded(agent_id, epoch, row.seq))
            self._live[agent_id] = live
        live.next_seq = row.seq + 1
        return live.projector.add(row)

    async def _seeded(self, agent_id: str, epoch: str, seq: int) -> Projector:
        def fetch(d: Direction, c: Cursor | None, n: int | None) -> Awaitable[FetchResult]:
            return self._fetch(agent_id, d, c, n)

        projector = Projector(keep_all=False)
        # An agent that is gone has nothing to seed from: its removal follows in the stream.
        with contextlib.suppress(CorralError):
            projector.add_all(await live_seed(fetch, epoch, seq))
        return projector
