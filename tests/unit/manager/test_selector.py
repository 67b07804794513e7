"""Label selectors for ListAgents: parsing and matching."""

from __future__ import annotations

import pytest

from corral_server.errors import InvalidArgument
from corral_server.manager.selector import Selector, Term, parse_selector

LABELS = {"team": "core", "env": "prod", "flag": ""}


def matches(text: str, labels: dict[str, str] = LABELS) -> bool:
    return parse_selector(text).matches(labels)


def test_an_empty_selector_has_no_terms_and_matches_everything() -> None:
    assert parse_selector("") == Selector(())
    assert parse_selector("   ") == Selector(())
    assert matches("")
    assert matches("", {})


def test_each_term_form_parses_to_its_key_value_and_negation() -> None:
    assert parse_selector("team=core, env!=dev, flag, !gone") == Selector(
        (
            Term("team", "core", negated=False),
            Term("env", "dev", negated=True),
            Term("flag", None, negated=False),
            Term("gone", None, negated=True),
        )
    )


def test_spaces_around_keys_and_values_are_ignored() -> None:
    assert parse_selector(" team = core ") == Selector((Term("team", "core", negated=False),))
    assert parse_selector("env  !=  dev") == Selector((Term("env", "dev", negated=True),))


def test_equality_matches_only_the_exact_value() -> None:
    assert matches("team=core")
    assert not matches("team=cor")
    assert not matches("missing=core")


def test_an_empty_value_after_equals_matches_a_label_set_to_empty() -> None:
    assert matches("flag=")
    assert not matches("team=")
    assert not matches("missing=")


def test_inequality_matches_a_different_value_or_an_unset_label() -> None:
    assert matches("team!=ops")
    assert matches("missing!=anything")
    assert not matches("team!=core")


def test_a_bare_key_requires_the_label_to_be_set() -> None:
    assert matches("team")
    assert matches("flag")  # set, even if empty
    assert not matches("missing")


def test_a_negated_key_requires_the_label_to_be_unset() -> None:
    assert matches("!missing")
    assert not matches("!team")
    assert not matches("!flag")


def test_every_term_must_hold() -> None:
    assert matches("team=core,env=prod,flag,!missing")
    assert not matches("team=core,env=dev")
    assert not matches("team=core,!env")


def test_a_value_may_itself_contain_an_equals_sign() -> None:
    assert parse_selector("expr=a=b") == Selector((Term("expr", "a=b", negated=False),))
    assert matches("expr=a=b", {"expr": "a=b"})


@pytest.mark.parametrize(
    "text",
    ["team=core,,env=prod", "team=core,", ",team", " , ", "=core", "!=core", "!", "!a=b", "a!b"],
)
def test_malformed_selectors_are_invalid_arguments_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        parse_selector(text)
    assert [v.field for v in raised.value.violations] == ["label_selector"]
