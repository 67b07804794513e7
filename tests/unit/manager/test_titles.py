"""The title rules (manager/titles.py): the fallback cut from a prompt, and which source may
replace which."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral_server.domain.agent import Agent, AgentId, Idle, TitleSource
from corral_server.domain.content import ImagePart, TextPart
from corral_server.manager.titles import (
    MAX_FALLBACK_CHARS,
    fallback_title,
    with_prompt_title,
    with_provider_title,
)

AGENT = Agent(AgentId("a" * 32), "scripted", "/", Idle(), 1, 1, "e1", 1)


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Fix the bug", "Fix the bug"),
        ("\n\n   \n  Fix\tthe   bug  \nsecond line", "Fix the bug"),
        ("word " * 30, "word word word word word word word word word word word word…"),
        ("x" * 100, "x" * (MAX_FALLBACK_CHARS - 1) + "…"),
        ("a" * 40 + " " + "b" * 40, "a" * 40 + "…"),
        (
            "Is it done, or not yet; " * 5,
            "Is it done, or not yet; Is it done, or not yet; Is it done…",
        ),
        ("", ""),
        ("   \n  ", ""),
    ],
)
def test_the_fallback_is_the_first_line_cut_on_a_word_boundary(text: str, title: str) -> None:
    assert fallback_title((TextPart(text),)) == title
    assert len(title) <= MAX_FALLBACK_CHARS


def test_a_prompt_of_images_only_gives_no_fallback() -> None:
    assert fallback_title((ImagePart("image/png", b"\x89PNG"),)) == ""
    assert with_prompt_title(AGENT, (ImagePart("image/png", b"\x89PNG"),)) is AGENT


def test_the_fallback_titles_only_an_untitled_agent() -> None:
    titled = with_prompt_title(AGENT, (TextPart("hello there"),))
    assert (titled.title, titled.title_source) == ("hello there", TitleSource.PROMPT)
    assert with_prompt_title(titled, (TextPart("later"),)) is titled
    cleared = replace(AGENT, title="", title_source=TitleSource.USER)  # a person cleared it
    assert with_prompt_title(cleared, (TextPart("hello"),)) is cleared


@pytest.mark.parametrize(
    ("title", "source", "kept"),
    [
        ("from the prompt", TitleSource.PROMPT, False),
        ("the provider's first", TitleSource.PROVIDER, False),
        ("", TitleSource.NONE, False),
        ("a person's", TitleSource.USER, True),
        ("", TitleSource.USER, True),
        # A record from before sources were stored: its title was a person's.
        ("an old record's", TitleSource.NONE, True),
    ],
)
def test_a_providers_title_replaces_all_but_a_persons(
    title: str, source: TitleSource, kept: bool
) -> None:
    agent = replace(AGENT, title=title, title_source=source)
    named = with_provider_title(agent, "  Login\n fix ")
    if kept:
        assert named is agent
    else:
        assert (named.title, named.title_source) == ("Login fix", TitleSource.PROVIDER)


def test_an_empty_or_unchanged_provider_title_changes_nothing() -> None:
    named = with_provider_title(AGENT, "Login fix")
    assert with_provider_title(named, "Login fix") is named
    assert with_provider_title(named, "  \n ") is named


def test_a_providers_title_is_cleaned_and_bounded() -> None:
    named = with_provider_title(AGENT, "bad \ud800 half" + "y" * 2_000)
    assert named.title.startswith("bad \ufffd half") and len(named.title) == 1_000
