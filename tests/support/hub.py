"""Reading a hub subscription without an event loop turn, for tests that state exactly what a
subscriber has ready at one moment (the rpc edge only ever iterates a subscription)."""

from __future__ import annotations

from corral_server.hub import Subscription, SubscriptionState
from corral_server.hub.subscription import FROM_LOG


def poll(sub: Subscription) -> bytes | None:
    """The next batch if one is ready now, without waiting; None when nothing is (or the
    subscription has ended, and then it is closed). Catch-up steps run back to back here,
    without yielding; a step that must read the durable log is not ready (None)."""
    while True:
        batch = sub.ready()
        if batch is FROM_LOG:
            return None
        if batch is None and sub.state is SubscriptionState.ENDED:
            sub.close()
        if batch != b"":
            return batch
