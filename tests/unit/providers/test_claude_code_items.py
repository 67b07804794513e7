"""Claude Code stream-json lines as timeline items and turn ends (claude_code_items.py), on
lines shaped as claude 2.1 writes them: each text is reported once whether it streamed, half
streamed or came whole; tool calls follow their use and result; result subtypes end turns."""

from __future__ import annotations

from typing import Any, cast

from corral_server.domain.agent import AgentError, Usage
from corral_server.domain.timeline import AssistantMessage, Reasoning, ToolCall, ToolCallStatus
from corral_server.providers.base import (
    ProviderItem,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
)
from corral_server.providers.claude_code_items import ItemMapper, terminal, usage
from corral_server.providers.claude_code_messages import ResultLine, as_line


def mapper() -> ItemMapper:
    m = ItemMapper()
    m.start_turn("t1")
    return m


def start(message_id: str, index: int, kind: str = "text") -> dict[str, Any]:
    event = {"type": "content_block_start", "index": index, "content_block": {"type": kind}}
    return {"type": "stream_event", "event": event, "api_message_id": message_id}


def delta(message_id: str, index: int, text: str, kind: str = "text") -> dict[str, Any]:
    body = {"type": f"{kind}_delta", kind: text}
    event = {"type": "content_block_delta", "index": index, "delta": body}
    return {"type": "stream_event", "event": event, "api_message_id": message_id}


def assistant(message_id: str, block: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": message_id, "content": [block]}} | extra


def tool_result(call_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": content,
        "is_error": is_error,
    }
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def run(m: ItemMapper, *lines: Any) -> list[ProviderItem]:
    return [item for line in lines for item in m.map(as_line(line))]


def result(line: dict[str, Any]) -> ResultLine:
    """A `result` line as the session hands it on (unchecked, as parsed)."""
    return cast(ResultLine, line)


def test_streamed_text_is_reported_by_its_deltas_and_not_again_by_its_assistant_line() -> None:
    items = run(
        mapper(),
        start("msg_1", 0),
        delta("msg_1", 0, "hi "),
        delta("msg_1", 0, "there"),
        assistant("msg_1", {"type": "text", "text": "hi there"}),
    )
    assert items == [
        ProviderItem("t1", AssistantMessage("hi ", "msg_1"), "msg_1"),
        ProviderItem("t1", AssistantMessage("there", "msg_1"), "msg_1"),
    ]


def test_an_assistant_line_reports_what_the_deltas_did_not_carry_and_later_deltas_are_dropped() -> (
    None
):
    m = mapper()
    items = run(
        m,
        start("msg_1", 0),
        delta("msg_1", 0, "hi "),
        assistant("msg_1", {"type": "text", "text": "hi there"}),
        delta("msg_1", 0, "there"),
    )
    assert [i.item for i in items] == [
        AssistantMessage("hi ", "msg_1"),
        AssistantMessage("there", "msg_1"),
    ]


def test_without_stream_events_each_block_comes_whole() -> None:
    items = run(
        mapper(),
        assistant("msg_1", {"type": "thinking", "thinking": "hmm"}),
        assistant("msg_1", {"type": "text", "text": "42"}),
    )
    assert [(i.item, i.provider_message_id) for i in items] == [
        (Reasoning("hmm"), "msg_1"),
        (AssistantMessage("42", "msg_1"), "msg_1"),
    ]


def test_thinking_and_text_blocks_of_one_message_stream_under_its_id() -> None:
    items = run(
        mapper(),
        start("msg_1", 0, "thinking"),
        delta("msg_1", 0, "deep", "thinking"),
        assistant("msg_1", {"type": "thinking", "thinking": "deep", "signature": "s"}),
        start("msg_1", 1),
        delta("msg_1", 1, "42"),
        assistant("msg_1", {"type": "text", "text": "42"}),
    )
    assert [i.item for i in items] == [Reasoning("deep"), AssistantMessage("42", "msg_1")]
    assert {i.provider_message_id for i in items} == {"msg_1"}


def test_an_api_error_message_and_the_users_own_text_are_not_timeline_items() -> None:
    error = {"type": "text", "text": "API Error: 500 boom"}
    interrupted = {
        "type": "user",
        "message": {"content": [{"type": "text", "text": "[Request interrupted by user]"}]},
    }
    assert run(mapper(), assistant("e1", error, is_api_error_message=True), interrupted) == []


def test_a_tool_use_is_a_pending_call_that_its_result_completes() -> None:
    m = mapper()
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    result = [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    items = run(m, assistant("msg_1", use))
    running = m.running("toolu_1")
    items += run(m, tool_result("toolu_1", result))
    pending = ToolCall("toolu_1", "Bash", ToolCallStatus.PENDING, {"command": "ls"})
    assert [i.item for i in items] == [
        pending,
        ToolCall("toolu_1", "Bash", ToolCallStatus.COMPLETED, {"command": "ls"}, "a\nb"),
    ]
    assert running is not None and running.item == ToolCall(
        "toolu_1", "Bash", ToolCallStatus.RUNNING, {"command": "ls"}
    )
    assert m.running("toolu_1") is None and m.running("unknown") is None  # it ended


def test_a_tool_result_with_an_error_fails_the_call_with_its_text() -> None:
    m = mapper()
    use = {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}
    items = run(m, assistant("msg_1", use), tool_result("toolu_1", "not today", is_error=True))
    assert items[-1].item == ToolCall(
        "toolu_1", "Write", ToolCallStatus.FAILED, {}, error="not today"
    )


def test_lines_of_no_concern_and_odd_shapes_map_to_nothing() -> None:
    odd = [
        {"type": "system", "subtype": "init"},
        {"type": "stream_event", "event": "not a dict"},
        {"type": "stream_event", "event": {"type": "message_start"}, "api_message_id": "m"},
        delta("", 0, "no message id"),
        {
            "type": "stream_event",
            "event": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            },
            "api_message_id": "m",
        },
        {"type": "assistant", "message": "no"},
        assistant("m", {"type": "tool_use", "name": "no id"}),
        {"type": "user", "message": {"content": "plain text"}},
        {"type": "keep_alive"},
    ]
    assert run(mapper(), *odd) == []


def test_result_subtypes_end_the_turn() -> None:
    success = {
        "subtype": "success",
        "is_error": False,
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    api = {
        "subtype": "success",
        "is_error": True,
        "api_error_status": 429,
        "result": "API Error: 429 slow down",
    }
    max_turns = {"subtype": "error_max_turns", "is_error": True}
    during = {"subtype": "error_during_execution", "is_error": True, "errors": ["a", "b"]}
    assert terminal("t1", result(success), False) == ProviderTurnCompleted("t1", Usage(1, 2))
    assert terminal("t1", result(api), False) == ProviderTurnFailed(
        "t1", AgentError("API Error: 429 slow down", "MODEL_ERROR")
    )
    failed = terminal("t1", result(max_turns), False)
    assert isinstance(failed, ProviderTurnFailed) and "error_max_turns" in failed.error.message
    assert terminal("t1", result(during), False) == ProviderTurnFailed(
        "t1", AgentError("a; b", "AGENT_ERROR")
    )
    # An interrupt claude confirmed ends the turn canceled, whatever the result says.
    for line in (success, during):
        assert terminal("t1", result(line), True) == ProviderTurnCanceled("t1", "cancelled")


def test_usage_counts_all_input_and_this_turns_cost() -> None:
    line = {
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 4,
            "cache_read_input_tokens": 6,
            "output_tokens": 7,
        },
        "total_cost_usd": 9.0,  # the session's running total: not this turn's
        "model_usage_since_last_result": {"a": {"costUSD": 0.5}, "b": {"costUSD": 0.25}, "c": "?"},
    }
    assert usage(result(line)) == Usage(20, 7, 6, 0.75)
    assert usage(result({"usage": {"input_tokens": "x"}})) == Usage()
    assert usage(result({})) is None
