"""The hub's index of subscriptions (etcd's watcher groups): every open one, and the LIVE ones
by scope, which are the ones publish hands events to.

Owns the membership only: which subscriptions are open, and which are live under which agent
id. Must not: write a subscription's fields or decide a transition (catch_up.py moves a
subscription into and out of the live set; delivery.py removes it when it closes).
"""

from __future__ import annotations

from corral_server.hub.subscription import Subscription


class SubscriptionIndex:
    __slots__ = ("by_agent", "every", "live_count", "open")

    def __init__(self) -> None:
        # Every subscription that is not closed, in any state, in the order it subscribed.
        self.open: dict[Subscription, None] = {}
        # Exactly the LIVE subscriptions: an all-agents one in `every`, a scoped one under each
        # of its agent ids (an event has one agent id, so publish meets each subscription at
        # most once per event). Dicts as ordered sets: O(1) removal, iteration in join order.
        self.every: dict[Subscription, None] = {}
        self.by_agent: dict[str, dict[Subscription, None]] = {}
        # len of the live set (the pacer shares its budget among the live subscriptions).
        self.live_count = 0

    def add(self, sub: Subscription) -> None:
        self.open[sub] = None

    def remove(self, sub: Subscription) -> None:
        """Forget `sub` (closed); the caller has taken it out of the live set first."""
        self.open.pop(sub, None)

    def join_live(self, sub: Subscription) -> None:
        self.live_count += 1
        if not sub.scope:
            self.every[sub] = None
            return
        for agent_id in sub.scope:
            self.by_agent.setdefault(agent_id, {})[sub] = None

    def leave_live(self, sub: Subscription) -> None:
        self.live_count -= 1
        if not sub.scope:
            self.every.pop(sub, None)
            return
        for agent_id in sub.scope:
            subs = self.by_agent.get(agent_id)
            if subs is not None:
                subs.pop(sub, None)
                if not subs:
                    del self.by_agent[agent_id]
