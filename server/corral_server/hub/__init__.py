"""The server-wide event hub: one revision order, each event encoded once, fanned out to
every subscriber without the writer ever waiting for a reader."""

from corral_server.hub.event_hub import Encoder, EventHub, Prepared, new_incarnation
from corral_server.hub.ring import frame
from corral_server.hub.subscription import SnapshotFn, Subscription, SubscriptionState

__all__ = [
    "Encoder",
    "EventHub",
    "Prepared",
    "SnapshotFn",
    "Subscription",
    "SubscriptionState",
    "frame",
    "new_incarnation",
]
