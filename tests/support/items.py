"""Hypothesis strategies for timeline items: clean ones (what the store holds) and hostile ones
(what a provider may report before manager/sanitize.py cleans it)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from corral_server.domain import timeline as dt

texts = st.text(max_size=60)
# Lone surrogates, NULs and astral characters: what json.loads and real agents produce.
hostile_texts = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.sampled_from(["\x00", "\U0001f600", "é"]),
    ),
    max_size=40,
)

json_values: st.SearchStrategy[dt.JsonValue] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=30,
)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


class _Odd:
    def __str__(self) -> str:
        return "odd \ud800 object"


hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.just(10**400),
    st.floats(),  # NaN and infinities included
    hostile_texts,
    st.binary(max_size=8),
    st.builds(_Odd),
    st.integers(1, 200).map(_nested),
)
hostile_json: st.SearchStrategy[Any] = st.recursive(
    hostile_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(hostile_texts | st.integers() | st.none(), inner, max_size=4)
    ),
    max_leaves=20,
)


def items(text: st.SearchStrategy[str], json: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(dt.AssistantMessage, text, text),
        st.builds(dt.Reasoning, text),
        st.builds(dt.UserMessage, text, text, text),
        st.builds(
            dt.ToolCall,
            text,
            text,
            st.sampled_from(list(dt.ToolCallStatus)),
            st.none() | json,
            st.none() | json,
            text,
            st.none()
            | st.builds(
                dt.OutputRef, text, st.integers(0, 2**64 - 1), st.booleans(), st.booleans()
            ),
        ),
        st.builds(dt.Todo, st.lists(st.builds(dt.TodoEntry, text, st.booleans())).map(tuple)),
        st.builds(dt.ErrorItem, text, text),
        st.builds(dt.Compaction, text),
        st.builds(dt.SubagentNotice, text, text, text),
    )


clean_items = items(texts, json_values)
hostile_items = items(hostile_texts, hostile_json)
