"""Input rules checked before anything changes: prompts, cwd, title, labels, ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.errors import InvalidArgument
from corral_server.manager.validate import (
    Limits,
    check_cwd,
    check_id,
    check_labels,
    check_prompt,
    check_title,
)

LIMITS = Limits(
    max_prompt_chars=10, max_title_chars=5, max_labels=2, max_label_chars=4, max_id_chars=3
)
PNG = ImagePart("image/png", b"\x89PNG")


def violated_fields(error: InvalidArgument) -> list[str]:
    return [v.field for v in error.violations]


# --- prompts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    [
        (TextPart("hello"),),
        (PNG,),
        (TextPart(""), PNG),  # an empty caption next to an image is fine
        (TextPart("a"), TextPart("b")),
        (TextPart("x" * 10),),  # exactly at the limit
    ],
)
def test_well_formed_prompts_pass(prompt: Prompt) -> None:
    check_prompt(prompt, LIMITS)


def test_a_prompt_without_parts_is_rejected_on_its_field() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_prompt((), LIMITS, "initial_prompt")
    assert violated_fields(raised.value) == ["initial_prompt"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_a_prompt_of_only_blank_text_is_rejected_as_empty(text: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_prompt((TextPart(text),), LIMITS)
    assert violated_fields(raised.value) == ["content[0].text"]
    assert "empty" in raised.value.violations[0].description


def test_an_image_that_is_not_an_image_mime_type_is_rejected_on_its_index() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_prompt((TextPart("see"), ImagePart("application/pdf", b"%PDF")), LIMITS)
    assert violated_fields(raised.value) == ["content[1].image.mime_type"]


def test_a_prompt_over_the_limit_is_rejected_naming_the_limit() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_prompt((TextPart("x" * 11),), LIMITS)
    assert violated_fields(raised.value) == ["content"]
    assert "10" in raised.value.violations[0].description


def test_image_bytes_count_towards_the_prompt_limit() -> None:
    check_prompt((TextPart("x" * 6), ImagePart("image/png", b"1234")), LIMITS)
    with pytest.raises(InvalidArgument):
        check_prompt((TextPart("x" * 6), ImagePart("image/png", b"12345")), LIMITS)


# --- cwd ----------------------------------------------------------------------------------


def test_an_existing_absolute_directory_is_a_valid_cwd(tmp_path: Path) -> None:
    check_cwd(str(tmp_path))


def test_cwd_is_required() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_cwd("")
    assert violated_fields(raised.value) == ["cwd"]
    assert "required" in raised.value.message


def test_a_relative_cwd_is_rejected_even_if_it_exists() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_cwd(".")
    assert "absolute" in raised.value.message


def test_a_missing_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_cwd(str(tmp_path / "nope"))
    assert "no such directory" in raised.value.message


def test_a_file_is_not_a_cwd(tmp_path: Path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(InvalidArgument) as raised:
        check_cwd(str(file))
    assert violated_fields(raised.value) == ["cwd"]


# --- title --------------------------------------------------------------------------------


def test_a_title_up_to_the_limit_passes_and_one_char_more_is_rejected() -> None:
    check_title("", LIMITS)
    check_title("12345", LIMITS)
    with pytest.raises(InvalidArgument) as raised:
        check_title("123456", LIMITS)
    assert violated_fields(raised.value) == ["title"]


# --- labels -------------------------------------------------------------------------------


def test_labels_within_the_limits_pass() -> None:
    check_labels({}, LIMITS)
    check_labels({"team": "core", "k": ""}, LIMITS)


def test_too_many_labels_are_rejected() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_labels({"a": "1", "b": "2", "c": "3"}, LIMITS)
    assert violated_fields(raised.value) == ["labels"]


@pytest.mark.parametrize("key", ["", "a=b", "!a", "a,b", "a b", "toolong"])
def test_label_keys_that_a_selector_could_not_name_are_rejected(key: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_labels({key: "v"}, LIMITS)
    assert violated_fields(raised.value) == [f"labels[{key!r}]"]


@pytest.mark.parametrize("value", ["a,b", "12345"])
def test_label_values_with_commas_or_over_the_limit_are_rejected(value: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_labels({"k": value}, LIMITS)
    assert violated_fields(raised.value) == ["labels['k']"]


def test_every_label_violation_is_reported_at_once() -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_labels({"a=": "ok", "b": "x,y"}, LIMITS)
    assert violated_fields(raised.value) == ["labels['a=']", "labels['b']"]


# --- ids ----------------------------------------------------------------------------------


def test_an_id_is_required_and_bounded() -> None:
    check_id("request_id", "abc", LIMITS)
    with pytest.raises(InvalidArgument) as raised:
        check_id("request_id", "", LIMITS)
    assert violated_fields(raised.value) == ["request_id"]
    assert "required" in raised.value.message
    with pytest.raises(InvalidArgument) as raised:
        check_id("request_id", "abcd", LIMITS)
    assert "at most 3" in raised.value.message
