"""The history an import reads, mapped without a program: Claude Code transcript lines, a codex
thread's turns, and what an ACP agent replays on session/load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest
from acp import schema

from corral_server.domain.timeline import (
    AssistantMessage,
    JsonValue,
    Reasoning,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.errors import InvalidArgument, ProviderSessionNotFound
from corral_server.providers.acp_history import history_items as acp_history
from corral_server.providers.claude_code_history import (
    project_slug,
    transcript_items,
    transcript_path,
)
from corral_server.providers.codex_items import history_items as codex_history
from corral_server.providers.codex_protocol import Thread


def test_a_claude_transcript_maps_the_conversation_and_skips_what_is_not_it() -> None:
    lines = [
        {"type": "summary", "summary": "old"},
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hello"}},
        {"type": "user", "isMeta": True, "message": {"content": "<caveat>"}},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "hi"}]}},
        {
            "type": "assistant",
            "message": {
                "id": "m1",
                "content": [{"type": "tool_use", "id": "c1", "name": "Bash", "input": {"a": 1}}],
            },
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}]},
        },
        {"type": "assistant", "isSidechain": True, "message": {"id": "x", "content": []}},
        {
            "type": "user",
            "message": {"content": [{"type": "text", "text": "[Request interrupted by user]"}]},
        },
        "not json {",
    ]
    items = transcript_items(
        [line if isinstance(line, str) else json.dumps(line) for line in lines]
    )
    assert all(i.from_history for i in items)
    assert [i.item for i in items] == [
        UserMessage("hello", message_id="u1"),
        AssistantMessage("hi", "m1"),
        ToolCall("c1", "Bash", ToolCallStatus.PENDING, {"a": 1}),
        ToolCall("c1", "Bash", ToolCallStatus.COMPLETED, {"a": 1}, "ok"),
    ]


def test_a_claude_transcript_is_found_by_cwd_and_refuses_ids_that_leave_its_folder(
    tmp_path: Path,
) -> None:
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path)}
    folder = tmp_path / "projects" / project_slug("/w/my_app")
    folder.mkdir(parents=True)
    (folder / "abc-1.jsonl").write_text("")
    assert project_slug("/w/my_app") == "-w-my-app"
    assert transcript_path(env, "abc-1", "/w/my_app") == folder / "abc-1.jsonl"
    assert transcript_path(env, "abc-1", "/elsewhere") == folder / "abc-1.jsonl"
    with pytest.raises(InvalidArgument):
        transcript_path(env, "../abc-1", "/w/my_app")
    with pytest.raises(ProviderSessionNotFound):
        transcript_path(env, "abc-2", "/w/my_app")


def test_a_codex_threads_turns_become_user_messages_and_completed_items() -> None:
    thread: dict[str, JsonValue] = {
        "id": "th",
        "turns": [
            {
                "id": "t1",
                "status": "completed",
                "items": [
                    {
                        "type": "userMessage",
                        "id": "i0",
                        "content": [{"type": "text", "text": "go"}],
                    },
                    {"type": "reasoning", "id": "i1", "summary": ["think"], "content": []},
                    {
                        "type": "commandExecution",
                        "id": "i2",
                        "command": "ls",
                        "status": "completed",
                        "aggregatedOutput": "a.py",
                    },
                    {"type": "agentMessage", "id": "i3", "text": "done"},
                ],
            }
        ],
    }
    items = codex_history(cast(Thread, thread))  # as codex's answer is read
    assert all(i.from_history for i in items)
    kinds = [type(i.item) for i in items]
    assert kinds == [UserMessage, Reasoning, ToolCall, AssistantMessage]
    assert items[0].item == UserMessage("go", message_id="i0")
    assert items[3].item == AssistantMessage("done", "i3")
    call = items[2].item
    assert isinstance(call, ToolCall) and call.status is ToolCallStatus.COMPLETED


def test_an_acp_replay_joins_chunks_of_one_message_and_keeps_a_calls_latest_state() -> None:
    def chunk(kind: str, text: str) -> dict[str, object]:
        return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}

    updates = [
        chunk("user_message_chunk", "do "),
        chunk("user_message_chunk", "it"),
        chunk("agent_thought_chunk", "hm"),
        chunk("agent_message_chunk", "o"),
        chunk("agent_message_chunk", "k"),
        {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read", "status": "pending"},
        chunk("agent_message_chunk", "reading"),
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"},
        chunk("user_message_chunk", "thanks"),
    ]
    items = acp_history(
        schema.SessionNotification.model_validate({"sessionId": "s", "update": u}).update
        for u in updates
    )
    assert all(i.from_history and i.turn_id == "" for i in items)
    got = [i.item for i in items]
    assert [type(g) for g in got] == [
        UserMessage,
        Reasoning,
        AssistantMessage,
        ToolCall,
        AssistantMessage,
        UserMessage,
    ]
    assert got[0].text == "do it" and got[2].text == "ok" and got[5].text == "thanks"  # type: ignore[union-attr]
    call = got[3]
    assert isinstance(call, ToolCall) and call.status is ToolCallStatus.COMPLETED
    assert call.name == "Read"
