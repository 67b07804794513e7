"""The notification plan (docs/design.md#attention): a pure function, read top to bottom."""

from __future__ import annotations

import pytest

from corral_server.domain.agent import PARENT_AGENT_ID_LABEL, AttentionReason
from corral_server.domain.notification import NotificationPlan, NotifyKind
from corral_server.manager.presence import PRESENCE_MS, Presence, PresenceBook, notification_plan
from tests.support.fakes import idle_agent

NOW = 1_700_000_000_000
NOBODY = NotificationPlan(NotifyKind.NOBODY)
AGENT = idle_agent("a1")
FINISHED, ERROR = AttentionReason.FINISHED, AttentionReason.ERROR


def seen(focused: str = "", visible: bool = True, ago_ms: int = 0) -> Presence:
    return Presence("web", focused, visible, NOW - ago_ms)


@pytest.mark.parametrize(
    ("clients", "reason", "plan"),
    [
        ({"web": seen("a1")}, FINISHED, NotificationPlan(NotifyKind.NOBODY)),
        (
            {"web": seen("a1"), "phone": seen("a2", ago_ms=5)},
            ERROR,
            NotificationPlan(NotifyKind.NOBODY),
        ),
        ({"web": seen("a1", visible=False)}, FINISHED, NotificationPlan(NotifyKind.IN_APP, "web")),
        (
            {"old": seen("a2", ago_ms=100), "new": seen("a3", ago_ms=10)},
            FINISHED,
            NotificationPlan(NotifyKind.IN_APP, "new"),
        ),
        ({"web": seen("a1", ago_ms=PRESENCE_MS + 1)}, FINISHED, NotificationPlan(NotifyKind.PUSH)),
        (
            {"web": seen("a2", ago_ms=PRESENCE_MS)},
            FINISHED,
            NotificationPlan(NotifyKind.IN_APP, "web"),
        ),
        ({}, FINISHED, NotificationPlan(NotifyKind.PUSH)),
        ({}, AttentionReason.PERMISSION, NotificationPlan(NotifyKind.PUSH)),
        ({}, ERROR, NotificationPlan(NotifyKind.NOBODY)),
    ],
)
def test_the_plan_follows_presence(
    clients: dict[str, Presence], reason: AttentionReason, plan: NotificationPlan
) -> None:
    assert notification_plan(AGENT, reason, clients, NOW) == plan


def test_an_agent_with_a_parent_never_notifies() -> None:
    from dataclasses import replace

    child = replace(AGENT, labels={PARENT_AGENT_ID_LABEL: "p1"})
    assert notification_plan(child, FINISHED, {}, NOW) == NotificationPlan(NotifyKind.NOBODY)


def test_the_book_keeps_the_latest_heartbeat_per_client_and_is_bounded() -> None:
    book = PresenceBook(max_clients=2)
    book.record("a", seen("x"))
    book.record("b", seen("y"))
    book.record("a", seen("z"))  # a's newer heartbeat moves it to the newest
    book.record("c", seen("w"))  # the oldest heartbeat (b) goes
    assert list(book.clients) == ["a", "c"] and book.clients["a"].focused_agent_id == "z"
