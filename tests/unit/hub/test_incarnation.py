"""The event log's incarnation: carried on every Synced and StreamEnding, and a resume point
from another incarnation is answered with a reset and a fresh snapshot, never replayed.

Batches are decoded as real SubscribeResponse messages (the real encoder, rpc/convert.py).
"""

from __future__ import annotations

from corral.v1 import event_service_pb2 as event_pb
from corral_server.domain.agent import Agent
from corral_server.domain.events import AgentRemoved, TurnStarted
from corral_server.hub import EventHub, Subscription, new_incarnation
from corral_server.rpc.convert import encode_event
from tests.support.fakes import idle_agent
from tests.support.hub import poll


def agents(scope: frozenset[str]) -> list[Agent]:
    return [idle_agent("a1")]


def events(sub: Subscription) -> list[event_pb.Event]:
    """Everything the subscription has ready now, without waiting."""
    out: list[event_pb.Event] = []
    while (batch := poll(sub)) is not None:
        out += event_pb.SubscribeResponse.FromString(batch).events
    return out


def kinds(stream: list[event_pb.Event]) -> list[str]:
    return [str(e.WhichOneof("payload")) for e in stream]


def hub_with_history(count: int, incarnation: str | None = None) -> EventHub:
    hub = EventHub(encode_event, incarnation=incarnation)
    for index in range(count):
        hub.publish(TurnStarted("a1", f"t{index}"))
    return hub


def test_each_new_event_log_has_its_own_incarnation() -> None:
    first, second = EventHub(encode_event), EventHub(encode_event)
    assert len(first.incarnation) == 32 and int(first.incarnation, 16) >= 0
    assert first.incarnation != second.incarnation
    assert new_incarnation() != new_incarnation()
    assert EventHub(encode_event, incarnation="kept").incarnation == "kept"


def test_synced_carries_the_incarnation_fresh_and_after_a_resume() -> None:
    hub = hub_with_history(3)
    fresh = events(hub.subscribe(frozenset(), None, agents))
    assert kinds(fresh) == ["agent_upserted", "synced"]
    assert fresh[-1].synced.incarnation == hub.incarnation
    resumed = events(hub.subscribe(frozenset(), 1, agents, resume_incarnation=hub.incarnation))
    assert kinds(resumed) == ["turn_started", "turn_started", "synced"]
    assert [e.revision for e in resumed[:2]] == [2, 3]
    assert resumed[-1].synced.incarnation == hub.incarnation


def test_a_resume_from_another_incarnation_is_reset_with_a_fresh_snapshot() -> None:
    old = hub_with_history(5)
    restarted = hub_with_history(8)  # a new log whose head is past the old resume point
    sub = restarted.subscribe(frozenset(), 5, agents, resume_incarnation=old.incarnation)
    stream = events(sub)
    assert kinds(stream) == ["subscription_reset", "agent_upserted", "synced"]
    assert stream[0].subscription_reset.requested_revision == 5
    assert "incarnation" in stream[0].subscription_reset.reason
    assert stream[-1].synced == event_pb.Synced(
        revision=8, reset=True, incarnation=restarted.incarnation
    )
    restarted.publish(AgentRemoved("a1"))
    assert [e.revision for e in events(sub)] == [9]  # then live, like any reset


def test_a_resume_without_an_incarnation_is_taken_to_mean_this_log() -> None:
    hub = hub_with_history(4)
    stream = events(hub.subscribe(frozenset(), 2, agents))
    assert kinds(stream) == ["turn_started", "turn_started", "synced"]
    assert stream[-1].synced.incarnation == hub.incarnation


def test_an_incarnation_without_a_resume_revision_is_a_fresh_subscription() -> None:
    hub = hub_with_history(2)
    stream = events(hub.subscribe(frozenset(), None, agents, resume_incarnation="other"))
    assert kinds(stream) == ["agent_upserted", "synced"]
    assert not stream[-1].synced.reset


def test_stream_ending_carries_the_incarnation_with_the_resume_point() -> None:
    hub = hub_with_history(3)
    sub = hub.subscribe(frozenset(), None, agents)
    hub.end_all("draining")
    ending = events(sub)[-1]
    assert ending.stream_ending == event_pb.StreamEnding(
        resume_revision=3, reason="draining", incarnation=hub.incarnation
    )
