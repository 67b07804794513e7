"""Parsing the scripted provider's turn directives (providers/script_parser.py): `/autonomous`
sections, `/permissions N`, and the directives that shape a turn's end or its interrupts."""

from __future__ import annotations

import pytest

from corral_server.errors import InvalidArgument
from corral_server.providers.script_parser import MAX_PERMISSIONS, parse_script
from corral_server.providers.script_steps import (
    Autonomous,
    DuplicateTerminal,
    HangInterrupt,
    Permissions,
    ReplayTurn,
    Reply,
    Script,
    Sleep,
    TerminalWithoutId,
)


def _violations(text: str) -> list[str]:
    with pytest.raises(InvalidArgument) as caught:
        parse_script(text)
    return [v.description for v in caught.value.violations]


def test_the_lines_after_autonomous_are_the_provider_turns_script() -> None:
    script = parse_script("hello\n/reply first\n/autonomous\nlater\n/sleep 5\n/reply second")
    assert script.text == "hello" and script.steps == (Reply("first"),)
    section = Script("later", (Sleep(5), Reply("second")))
    assert script.autonomous == Autonomous(section, with_id=True)


def test_an_autonomous_section_may_name_no_id_and_be_empty() -> None:
    script = parse_script("/reply first\n/autonomous no-id")
    assert script.autonomous == Autonomous(Script("", ()), with_id=False)
    # The prompt itself may be only an autonomous section.
    assert parse_script("/autonomous").autonomous == Autonomous(Script("", ()), True)


def test_a_prompt_holds_one_autonomous_section_with_a_known_option() -> None:
    assert _violations("/autonomous\n/reply a\n/autonomous") == [
        "line 3: a prompt holds at most one /autonomous section"
    ]
    assert _violations("/autonomous later") == [
        "line 1: /autonomous takes nothing or `no-id`, got 'later'"
    ]
    # A bad line inside the section is numbered as in the prompt.
    assert _violations("/reply a\n/autonomous\n/bogus")[0].startswith("line 3: unknown")


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("/hang-interrupt", HangInterrupt()),
        ("/terminal-without-id", TerminalWithoutId()),
        ("/duplicate-terminal", DuplicateTerminal()),
        ("/replay-turn turn-abc", ReplayTurn("turn-abc")),
        ("/permissions 65", Permissions(65)),
    ],
)
def test_turn_directives_parse(line: str, step: object) -> None:
    assert parse_script(line).steps == (step,)


@pytest.mark.parametrize(
    "line",
    [
        "/hang-interrupt now",
        "/terminal-without-id x",
        "/duplicate-terminal 2",
        "/replay-turn",
        "/replay-turn a b",
        "/replay-turn " + "x" * 129,
        "/permissions 0",
        f"/permissions {MAX_PERMISSIONS + 1}",
        "/permissions many",
    ],
)
def test_bad_turn_directives_are_invalid(line: str) -> None:
    assert len(_violations(line)) == 1
