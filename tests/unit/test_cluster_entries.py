"""A batch's entries (cluster/entries.py) read back as written, and the owner's publisher
(cluster/replica.py) appends only its own agents' events, the record with a first upsert."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral_server.cluster import entries
from corral_server.cluster.channel import AgentChannel
from corral_server.cluster.replica import ClusterPublisher
from corral_server.domain.events import AgentUpserted
from corral_server.domain.timeline import AssistantMessage
from corral_server.errors import AgentOwnedElsewhere
from corral_server.hub import EventHub
from corral_server.timeline.store import NewRow
from tests.support.fakes import idle_agent

texts = st.text(max_size=40)


@given(
    st.integers(1, 2**40),
    st.integers(0, 2**50),
    texts,
    texts,
    st.binary(max_size=200),
    st.none() | st.binary(max_size=200),
)
def test_a_row_entry_reads_back_as_written(
    seq: int, ms: int, turn: str, message: str, item: bytes, output: bytes | None
) -> None:
    row = NewRow(AssistantMessage("x"), ms, turn, message, output)
    read = entries.read_row(entries.row_entry(seq, row, item))
    assert (read.seq, read.timestamp_ms, read.turn_id, read.provider_message_id) == (
        seq,
        ms,
        turn,
        message,
    )
    assert (read.item, read.output) == (item, output)


@given(
    st.lists(
        st.tuples(
            st.integers(1, 2**40),
            st.integers(0, 2**50),
            st.sampled_from(["", "t1", "t2"]),
            texts,
            st.binary(max_size=200),
            st.none() | st.binary(max_size=200),
        ),
        max_size=6,
    )
)
def test_the_followers_fast_read_of_a_row_entry_is_the_row_as_written(
    written: list[tuple[int, int, str, str, bytes, bytes | None]],
) -> None:
    """Rows of one turn and of others in turn (the fast read keeps the last turn id)."""
    stand_in = AssistantMessage("not read")
    for seq, ms, turn, message, item, output in written:
        row = NewRow(AssistantMessage("x"), ms, turn, message, output)
        read = entries.read_new_row(entries.row_entry(seq, row, item), stand_in)
        assert read == (seq, row._replace(item=stand_in), item)


@given(st.integers(1, 2**40), texts)
def test_a_message_id_entry_reads_back_as_written(seq: int, message: str) -> None:
    assert entries.read_message_id(entries.message_id_entry(seq, message)) == (seq, message)


class Recorded:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, sent: list[bytes], future: bool = True) -> None:
        self.sent.extend(sent)


def test_the_owner_appends_its_agents_events_and_drops_other_nodes() -> None:
    mine = Recorded()

    def channel(agent_id: str, new: bool) -> AgentChannel:
        if agent_id != "mine":
            raise AgentOwnedElsewhere(agent_id, "b")
        return mine  # type: ignore[return-value]

    publisher = ClusterPublisher(EventHub(lambda revision, event: b"body"), channel)
    publisher.publish(AgentUpserted(idle_agent("mine")))
    publisher.publish(AgentUpserted(idle_agent("theirs")))
    assert [entry[:1] for entry in mine.sent] == [b"A", b"E"]
    assert mine.sent[1] == entries.event_entry(b"body")
