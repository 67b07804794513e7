"""A Subscribe stream for one agent, read from its `synced` on: the integration tests of the
scripted provider's turn directives wait on its events (never on sleeps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.v1 import event_service_pb2 as event_pb
from tests.support.client import Stubs


class Watch:
    """Every event of one agent after the subscription's `synced`, in order (`seen`)."""

    def __init__(self, stubs: Stubs, agent_id: str) -> None:
        self._call = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
        self.seen: list[Any] = []
        # Events read (a response carries several) and not yet looked at by `until`.
        self._unread: list[Any] = []

    async def synced(self) -> Watch:
        await self.until(lambda e: e.HasField("synced"))
        self.seen.clear()
        return self

    async def until(self, done: Callable[[Any], bool]) -> Any:
        """Read until an event for which `done` is true; that event."""
        while True:
            while self._unread:
                event = self._unread.pop(0)
                self.seen.append(event)
                if done(event):
                    return event
            response = await self._call.read()
            assert isinstance(response, event_pb.SubscribeResponse), "the stream ended"
            self._unread.extend(response.events)

    def kinds(self) -> list[str]:
        return [str(e.WhichOneof("payload")) for e in self.seen]

    def terminals(self) -> list[tuple[str, str]]:
        """(kind, turn id) of every turn_started and terminal event seen."""
        kinds = ("turn_started", "turn_completed", "turn_failed", "turn_canceled")
        out = []
        for event in self.seen:
            kind = event.WhichOneof("payload")
            if kind in kinds:
                out.append((kind, getattr(event, kind).turn_id))
        return out

    def cancel(self) -> None:
        self._call.cancel()


def is_(kind: str, turn_id: str | None = None) -> Callable[[Any], bool]:
    """An event of `kind` (naming `turn_id`, when given)."""

    def check(event: Any) -> bool:
        if event.WhichOneof("payload") != kind:
            return False
        return turn_id is None or getattr(event, kind).turn_id == turn_id

    return check


def idle(event: Any) -> bool:
    """An agent_upserted showing the agent idle."""
    return bool(
        event.HasField("agent_upserted")
        and event.agent_upserted.agent.lifecycle.WhichOneof("state") == "idle"
    )
