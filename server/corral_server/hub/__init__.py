"""The server-wide event hub: one revision order, each event encoded once, fanned out to
every subscriber without publishing ever waiting for a reader."""

from corral_server.hub.event_hub import RETAIN_BYTES, EventHub, Prepared, new_incarnation
from corral_server.hub.pacing import SUBSCRIBER_WRITES_PER_S
from corral_server.hub.ring import Encoder, frame
from corral_server.hub.subscription import SnapshotFn, Subscription, SubscriptionState

__all__ = [
    "RETAIN_BYTES",
    "SUBSCRIBER_WRITES_PER_S",
    "Encoder",
    "EventHub",
    "Prepared",
    "SnapshotFn",
    "Subscription",
    "SubscriptionState",
    "frame",
    "new_incarnation",
]
