"""curate_activity: the plain-text digest of a timeline (GetActivity)."""

from __future__ import annotations

import pytest

from corral_server.domain.timeline import (
    AssistantMessage,
    Compaction,
    ErrorItem,
    JsonValue,
    Reasoning,
    SubagentNotice,
    TimelineItem,
    TimelineRow,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.errors import InvalidArgument
from corral_server.timeline.activity import (
    DEFAULT_ACTIVITY_MAX_CHARS,
    ELLIPSIS,
    ActivityDigest,
    curate_activity,
    describe_item,
    summarise_input,
)


def rows_of(*items: TimelineItem, first_seq: int = 1) -> list[TimelineRow]:
    return [TimelineRow(first_seq + i, 0, item) for i, item in enumerate(items)]


@pytest.mark.parametrize(
    ("item", "text"),
    [
        (UserMessage("fix the build"), "User: fix the build"),
        (AssistantMessage("done"), "Assistant: done"),
        (Reasoning("  the test is flaky \n"), "Thinking: the test is flaky"),
        (
            ToolCall("c1", "bash", ToolCallStatus.COMPLETED, {"command": "make test"}),
            "Tool bash [completed]: make test",
        ),
        (ToolCall("c1", "think", ToolCallStatus.PENDING), "Tool think [pending]:"),
        (
            ToolCall("c1", "read", ToolCallStatus.FAILED, {"path": "a.py"}, error="no such\nfile"),
            "Tool read [failed]: a.py -> error: no such file",
        ),
        (
            Todo((TodoEntry("plan", completed=True), TodoEntry("build"))),
            "Todo: [x] plan; [ ] build",
        ),
        (ErrorItem("provider crashed"), "Error: provider crashed"),
        (ErrorItem("quota", code="RATE_LIMITED"), "Error (RATE_LIMITED): quota"),
        (Compaction("earlier turns fixed lint"), "Compaction: earlier turns fixed lint"),
        (SubagentNotice("run-1", "child-7", "tests pass"), "Subagent child-7: tests pass"),
    ],
)
def test_each_kind_of_item_is_described_with_its_label(item: TimelineItem, text: str) -> None:
    assert describe_item(item) == text


def test_a_multi_line_message_stays_a_block() -> None:
    assert describe_item(UserMessage("line one\nline two")) == "User: line one\nline two"


@pytest.mark.parametrize(
    ("value", "summary"),
    [
        (None, ""),
        ("ls -la", "ls -la"),
        ({"file_path": "src/x.py", "content": "..."}, "src/x.py"),
        ({"command": "  ", "path": "p"}, "p"),  # a blank telling field is skipped
        ({"a": 1, "b": [True, None]}, '{"a":1,"b":[true,null]}'),
        ([1, "two"], '[1,"two"]'),
        (3.5, "3.5"),
        ("multi\n  line\tinput", "multi line input"),
    ],
)
def test_tool_inputs_are_summarised_on_one_line(value: JsonValue, summary: str) -> None:
    assert summarise_input(value) == summary


def test_a_long_tool_input_is_cut_with_an_ellipsis() -> None:
    summary = summarise_input({"command": "x" * 1000})
    assert summary.endswith(ELLIPSIS)
    assert 10 < len(summary) < 1000


def test_rows_are_digested_oldest_first_one_block_each() -> None:
    rows = rows_of(UserMessage("hi"), AssistantMessage("hello"), first_seq=5)
    assert curate_activity(rows, 1000) == ActivityDigest("User: hi\nAssistant: hello", False, 5, 6)


def test_an_empty_timeline_gives_an_empty_digest() -> None:
    assert curate_activity([], 100) == ActivityDigest("", False, 0, 0)


def test_over_budget_the_oldest_whole_rows_are_dropped() -> None:
    rows = rows_of(UserMessage("aaaa"), UserMessage("bbbb"), UserMessage("cccc"))
    # "User: bbbb\nUser: cccc" is 21 characters; the oldest row would need 11 more.
    digest = curate_activity(rows, 25)
    assert digest == ActivityDigest("User: bbbb\nUser: cccc", True, 2, 3)


def test_a_digest_that_fits_exactly_is_not_truncated() -> None:
    rows = rows_of(UserMessage("aaaa"), UserMessage("bbbb"))
    digest = curate_activity(rows, len("User: aaaa\nUser: bbbb"))
    assert (digest.truncated, digest.first_seq) == (False, 1)


def test_a_single_overlong_newest_row_is_cut_with_an_ellipsis() -> None:
    rows = rows_of(UserMessage("old"), AssistantMessage("z" * 100))
    digest = curate_activity(rows, 20)
    assert digest == ActivityDigest("Assistant: " + "z" * 8 + ELLIPSIS, True, 2, 2)
    assert len(digest.text) == 20


def test_a_budget_of_zero_means_the_default() -> None:
    rows = rows_of(*(UserMessage("m" * 95) for _ in range(100)))
    digest = curate_activity(rows, 0)
    assert DEFAULT_ACTIVITY_MAX_CHARS - 101 < len(digest.text) <= DEFAULT_ACTIVITY_MAX_CHARS
    assert digest.truncated


def test_a_negative_budget_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as raised:
        curate_activity([], -1)
    assert raised.value.violations[0].field == "max_chars"


def test_tool_call_updates_fold_into_one_line_with_the_latest_status() -> None:
    rows = rows_of(
        ToolCall("c1", "bash", ToolCallStatus.PENDING, {"command": "make"}),
        ToolCall("c2", "read", ToolCallStatus.RUNNING, {"path": "a"}),
        ToolCall("c1", "bash", ToolCallStatus.COMPLETED, {"command": "make"}),
        AssistantMessage("built"),
    )
    digest = curate_activity(rows, 1000)
    assert digest.text == ("Tool read [running]: a\nTool bash [completed]: make\nAssistant: built")
    assert (digest.first_seq, digest.last_seq, digest.truncated) == (1, 4, False)


def test_chunks_of_one_assistant_message_are_joined_into_one_block() -> None:
    rows = rows_of(
        AssistantMessage("Hel", message_id="m1"),
        AssistantMessage("lo", message_id="m1"),
        AssistantMessage("Bye", message_id="m2"),
        AssistantMessage("plain"),
        AssistantMessage("plain"),
    )
    digest = curate_activity(rows, 1000)
    assert digest.text == "Assistant: Hello\nAssistant: Bye\nAssistant: plain\nAssistant: plain"


def test_a_joined_message_counts_from_its_first_chunk() -> None:
    rows = rows_of(
        UserMessage("a long question that will not fit"),
        AssistantMessage("Hel", message_id="m1"),
        AssistantMessage("lo", message_id="m1"),
    )
    digest = curate_activity(rows, 20)
    assert digest == ActivityDigest("Assistant: Hello", True, 2, 3)
