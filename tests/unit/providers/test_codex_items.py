"""Codex notifications as timeline items, a turn's usage, and approval decisions: the pure
mappings of the codex provider (codex_items.py, codex_approvals.py)."""

from __future__ import annotations

from typing import Any

from corral_server.domain.agent import PermissionBehavior, PermissionResponse, Usage
from corral_server.domain.timeline import AssistantMessage, Reasoning, ToolCall, ToolCallStatus
from corral_server.providers import codex_approvals as approvals
from corral_server.providers.codex_items import ItemMapper, UsageTally


def mapper() -> ItemMapper:
    items = ItemMapper()
    items.start_turn("t1")
    return items


def test_a_completed_message_adds_only_what_its_deltas_did_not_carry() -> None:
    items = mapper()
    items.map("item/agentMessage/delta", {"itemId": "m1", "delta": "hel"})
    [rest] = items.map(
        "item/completed", {"item": {"type": "agentMessage", "id": "m1", "text": "hello"}}
    )
    assert rest.item == AssistantMessage("lo", "m1") and rest.provider_message_id == "m1"
    # A message codex never streamed arrives whole when it completes.
    [whole] = items.map(
        "item/completed", {"item": {"type": "agentMessage", "id": "m2", "text": "hi"}}
    )
    assert whole.item == AssistantMessage("hi", "m2")


def test_reasoning_summary_parts_are_one_row_separated_by_a_blank_line() -> None:
    items = mapper()
    got = [
        *items.map("item/reasoning/summaryPartAdded", {"itemId": "r1", "summaryIndex": 0}),
        *items.map("item/reasoning/summaryTextDelta", {"itemId": "r1", "delta": "one"}),
        *items.map("item/reasoning/summaryPartAdded", {"itemId": "r1", "summaryIndex": 1}),
        *items.map("item/reasoning/summaryTextDelta", {"itemId": "r1", "delta": "two"}),
        *items.map(
            "item/completed",
            {"item": {"type": "reasoning", "id": "r1", "summary": ["one", "two"]}},
        ),
    ]
    assert [g.item for g in got] == [Reasoning("one"), Reasoning("\n\n"), Reasoning("two")]
    assert {g.provider_message_id for g in got} == {"r1"}


def test_a_command_runs_then_completes_and_a_declined_one_fails_as_declined() -> None:
    items = mapper()
    command: dict[str, Any] = {"type": "commandExecution", "id": "c1", "command": "ls", "cwd": "/w"}
    [started] = items.map("item/started", {"item": command | {"status": "inProgress"}})
    assert started.item == ToolCall(
        "c1", "shell", ToolCallStatus.RUNNING, {"command": "ls", "cwd": "/w"}
    )
    done = command | {"status": "failed", "aggregatedOutput": "boom", "exitCode": 2}
    [failed] = items.map("item/completed", {"item": done})
    assert isinstance(failed.item, ToolCall) and failed.item.error == "exit code 2"
    assert failed.item.output == "boom"
    [declined] = items.map("item/completed", {"item": command | {"status": "declined"}})
    assert isinstance(declined.item, ToolCall)
    assert (declined.item.status, declined.item.error) == (ToolCallStatus.FAILED, "declined")
    assert items.tool_call("c1") == declined.item


def test_a_patch_shows_its_changes_and_a_plan_is_a_todo() -> None:
    items = mapper()
    change: Any = {"path": "/w/a", "kind": {"type": "add"}, "diff": "+x\n"}
    patch: Any = {"type": "fileChange", "id": "p1", "status": "completed", "changes": [change]}
    [call] = items.map("item/completed", {"item": patch})
    assert call.item == ToolCall(
        "p1",
        "apply_patch",
        ToolCallStatus.COMPLETED,
        {"changes": [{"path": "/w/a", "kind": "add", "diff": "+x\n"}]},
    )
    plan: Any = [{"step": "read", "status": "completed"}, {"step": "write", "status": "pending"}]
    [todo] = items.map("turn/plan/updated", {"plan": plan})
    assert [(e.text, e.completed) for e in todo.item.entries] == [  # type: ignore[union-attr]
        ("read", True),
        ("write", False),
    ]


def test_a_turns_usage_is_the_threads_total_since_before_its_first_call() -> None:
    tally = UsageTally()
    assert tally.usage() is None
    call: Any = {"inputTokens": 10, "outputTokens": 5, "cachedInputTokens": 2}
    # A resumed thread: 100 / 50 / 20 came from turns corral never saw.
    first: Any = {"inputTokens": 110, "outputTokens": 55, "cachedInputTokens": 22}
    second: Any = {"inputTokens": 120, "outputTokens": 60, "cachedInputTokens": 24}
    tally.update({"total": first, "last": call})
    tally.update({"total": second, "last": call})
    tally.update({"total": second, "last": call})  # codex repeats an update at times
    assert tally.usage() == Usage(input_tokens=20, output_tokens=10, cached_input_tokens=4)


def test_an_answer_names_an_offered_decision_or_falls_back_to_accept_or_decline() -> None:
    amend: Any = {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["ls"]}}
    params: Any = {"availableDecisions": ["accept", amend, "cancel"]}
    offered = approvals.offered(approvals.COMMAND_APPROVAL, params)
    permission = approvals.permission("r1", "t1", approvals.COMMAND_APPROVAL, params, None, offered)
    assert [(a.id, a.kind) for a in permission.actions] == [
        ("accept", "allow_once"),
        ("acceptWithExecpolicyAmendment", "allow_always"),
        ("cancel", "reject_and_stop"),
    ]
    allow, deny = PermissionBehavior.ALLOW, PermissionBehavior.DENY
    chosen = PermissionResponse(allow, "acceptWithExecpolicyAmendment")
    assert approvals.decision(offered, chosen) == amend
    assert approvals.decision(offered, PermissionResponse(allow)) == "accept"
    assert approvals.decision(offered, PermissionResponse(deny)) == "decline"
    assert approvals.decision(offered, PermissionResponse(deny, "cancel")) == "cancel"
    assert approvals.offered(approvals.FILE_CHANGE_APPROVAL, {}) == (
        "accept",
        "acceptForSession",
        "decline",
        "cancel",
    )
