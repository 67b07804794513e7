"""The scripted provider's directives for replay and follow-ups (providers/script_parser.py):
`/history N`
(history replay) and `/follow-up TEXT` (a permission whose ALLOW answer asks for a follow-up
prompt)."""

from __future__ import annotations

import pytest

from corral_server.errors import InvalidArgument
from corral_server.providers.script_parser import MAX_HISTORY_ITEMS, parse_script
from corral_server.providers.script_steps import FollowUp, History


def test_history_parses_a_count_of_items() -> None:
    assert parse_script("/history 3").steps == (History(3),)
    assert parse_script(f"/history {MAX_HISTORY_ITEMS}").steps == (History(MAX_HISTORY_ITEMS),)


@pytest.mark.parametrize("argument", ["", "0", "-1", "x", "1.5", str(MAX_HISTORY_ITEMS + 1)])
def test_history_needs_a_count_from_one_to_the_limit(argument: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_script(f"/history {argument}".rstrip())
    (violation,) = caught.value.violations
    assert violation.description.startswith("line 1: /history takes a number of items")


def test_follow_up_keeps_its_prompt_which_may_hold_directives() -> None:
    assert parse_script("/follow-up /reply go on").steps == (FollowUp("/reply go on"),)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("/follow-up", "line 1: /follow-up needs the follow-up prompt"),
        ("/follow-up /nope", "line 1: /follow-up: its prompt is invalid: content: line 1: unknown"),
    ],
)
def test_follow_up_needs_a_valid_prompt(line: str, why: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_script(line)
    (violation,) = caught.value.violations
    assert violation.description.startswith(why)
