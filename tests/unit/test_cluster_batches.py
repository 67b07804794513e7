"""The event log's batch payloads and subjects, without a server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_server.cluster.log import batch_id, decode, encode, subject


@given(st.lists(st.binary(max_size=400), max_size=20))
def test_a_batch_decodes_to_its_events(events: list[bytes]) -> None:
    assert decode(encode(events)) == tuple(events)


def test_an_empty_batch_is_an_empty_payload() -> None:
    assert encode([]) == b""
    assert decode(b"") == ()


@pytest.mark.parametrize("agent", ["", "a.b", "a*", ">", "a b", "a\n"])
def test_an_agent_id_that_is_no_subject_token_is_refused(agent: str) -> None:
    with pytest.raises(ValueError, match="subject token"):
        subject(agent)


def test_batch_ids_differ_by_writer_and_position() -> None:
    ids = {batch_id("a", writer, expected) for writer in ("n1-3", "n2-9") for expected in (0, 5)}
    assert len(ids) == 4
    assert subject("agent_1-x") == "corral.events.agent_1-x"
