"""Parsing the scripted provider's prompts into steps (providers/script_parser.py)."""

from __future__ import annotations

import pytest

from corral_server.errors import InvalidArgument
from corral_server.providers.script_parser import KNOWN_DIRECTIVES, MAX_SLEEP_MS, parse_script
from corral_server.providers.script_steps import (
    Fail,
    Permission,
    RefuseInterrupt,
    Reply,
    Script,
    Sleep,
    Spawn,
    Step,
    Think,
    Tool,
)


def _violation(text: str) -> str:
    with pytest.raises(InvalidArgument) as caught:
        parse_script(text)
    (violation,) = caught.value.violations
    assert violation.field == "content"
    return violation.description


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("/reply Hello there", Reply("Hello there")),
        ("/think weighing options", Think("weighing options")),
        ("/tool read_file", Tool("read_file")),
        (
            '/tool read_file {"path": "a.txt", "n": [1, 2]}',
            Tool("read_file", {"path": "a.txt", "n": [1, 2]}),
        ),
        ("/sleep 250", Sleep(250)),
        ("/sleep 0", Sleep(0)),
        ("/fail disk on fire", Fail("disk on fire")),
        ("/refuse-interrupt", RefuseInterrupt()),
        ("/permission write_file", Permission("write_file")),
        ("/spawn summarise the README", Spawn("summarise the README")),
    ],
)
def test_each_directive_parses_to_its_step(line: str, step: Step) -> None:
    assert parse_script(line) == Script(text="", steps=(step,))


def test_directive_arguments_keep_inner_spacing_but_lose_outer_whitespace() -> None:
    assert parse_script("/reply   two  spaces\t ").steps == (Reply("two  spaces"),)


def test_directives_run_in_prompt_order_and_other_lines_are_the_text() -> None:
    script = parse_script("first line\n/think a\nsecond line\n/sleep 5\n/reply b")
    assert script.text == "first line\nsecond line"
    assert script.steps == (Think("a"), Sleep(5), Reply("b"))


def test_text_loses_leading_and_trailing_blank_lines_but_keeps_inner_ones() -> None:
    script = parse_script("\n  \n/think x\nhello\n\nworld\n   \n\n")
    assert script.text == "hello\n\nworld"


def test_only_a_slash_in_the_first_column_starts_a_directive() -> None:
    script = parse_script(" /reply not a directive")
    assert script == Script(text=" /reply not a directive", steps=())


def test_windows_line_endings_split_lines_like_unix_ones() -> None:
    script = parse_script("hi\r\n/reply ok\r\n")
    assert script == Script(text="hi", steps=(Reply("ok"),))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("just text", True),
        ("/think a\n/tool t\n/sleep 1\n/refuse-interrupt\n/permission p", True),
        ("/reply r", False),
        ("/fail f", False),
        ("/spawn s", False),
    ],
)
def test_only_reply_fail_or_spawn_suppress_the_default_reply(text: str, expected: bool) -> None:
    assert parse_script(text).needs_default_reply is expected


def test_unknown_directive_names_its_line_and_the_known_directives() -> None:
    description = _violation("hello\n\n/foo bar")
    assert description.startswith("line 3: unknown directive '/foo'")
    for known in KNOWN_DIRECTIVES:
        assert known in description


def test_directive_names_are_case_sensitive() -> None:
    assert "unknown directive '/Reply'" in _violation("/Reply hi")


def test_a_lone_slash_is_an_unknown_directive() -> None:
    assert _violation("/").startswith("line 1: unknown directive '/'")


def test_every_bad_line_gets_its_own_violation() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_script("/foo\nok\n/sleep soon\n/reply fine")
    descriptions = [v.description for v in caught.value.violations]
    assert len(descriptions) == 2
    assert descriptions[0].startswith("line 1:")
    assert descriptions[1].startswith("line 3: /sleep")
    assert "2 invalid directive lines" in caught.value.message


@pytest.mark.parametrize(
    "argument",
    ["", "-1", "1.5", "abc", "10ms", "٣", str(MAX_SLEEP_MS + 1), "9" * 5000],
)
def test_sleep_needs_a_non_negative_whole_number_of_milliseconds(argument: str) -> None:
    assert _violation(f"/sleep {argument}").startswith("line 1: /sleep takes a whole number")


def test_the_longest_allowed_sleep_parses() -> None:
    assert parse_script(f"/sleep {MAX_SLEEP_MS}").steps == (Sleep(MAX_SLEEP_MS),)


@pytest.mark.parametrize("raw", ['{"path": ', "{'single': 1}", '{"x": 1} trailing'])
def test_tool_input_that_is_not_json_is_rejected(raw: str) -> None:
    assert _violation(f"/tool read {raw}").startswith("line 1: /tool read: input is not valid JSON")


@pytest.mark.parametrize("raw", ['{"x": NaN}', '{"x": Infinity}'])
def test_tool_input_rejects_non_standard_json_constants(raw: str) -> None:
    assert "input is not valid JSON" in _violation(f"/tool read {raw}")


def test_tool_input_nested_too_deeply_for_the_parser_is_rejected() -> None:
    assert "input is not valid JSON" in _violation("/tool t " + "[" * 100_000)


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "3", "null"])
def test_tool_input_must_be_a_json_object(raw: str) -> None:
    assert "input must be a JSON object" in _violation(f"/tool t {raw}")


@pytest.mark.parametrize(
    "line", ["/reply", "/think  ", "/tool", "/fail", "/permission", "/spawn", "/sleep"]
)
def test_directives_that_take_an_argument_reject_a_missing_one(line: str) -> None:
    assert _violation(line).startswith(f"line 1: {line.strip()}")


def test_refuse_interrupt_takes_no_argument() -> None:
    assert "takes no argument" in _violation("/refuse-interrupt please")


@pytest.mark.parametrize("text", ["", "\n\n", "   \n\t\n"])
def test_a_prompt_with_neither_text_nor_directives_is_rejected(text: str) -> None:
    assert "empty" in _violation(text)


def test_a_prompt_of_only_directives_is_valid() -> None:
    assert parse_script("/sleep 1") == Script(text="", steps=(Sleep(1),))


def test_tool_input_nested_deeper_than_protobuf_can_carry_is_rejected() -> None:
    deep = "{" + '"k": {' * 40 + "}" * 40 + "}"
    assert "deeper than 32" in _violation(f"/tool read {deep}")
    shallow = "{" + '"k": {' * 10 + "}" * 10 + "}"
    assert parse_script(f"/tool read {shallow}").steps
