"""Claude Code (`claude -p`, stream-json both ways) runs whole turns offline against the fake
Anthropic API: text, thinking, tools behind `can_use_tool` permission requests, interrupt, and
a model HTTP error."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.agents import programs
from tests.agents.child import Child, Message
from tests.agents.conftest import Place, Spawn, Timings
from tests.support.fake_models import FakeModelServer

STDIO_PERMISSIONS = ("--permission-prompt-tool", "stdio")


def user(text: str) -> Message:
    return {"type": "user", "message": {"role": "user", "content": text}}


def deltas(lines: list[Message], kind: str) -> str:
    out = []
    for line in lines:
        if line.get("type") != "stream_event":
            continue
        delta = line["event"].get("delta", {})
        if delta.get("type") == kind:
            out.append(delta.get("text") or delta.get("thinking") or "")
    return "".join(out)


async def run_turn(
    child: Child, text: str, decide: dict[str, Any] | None = None, timeout_s: float = 20
) -> tuple[Message, list[Message]]:
    """Sends one prompt; answers every can_use_tool with `decide`; returns the result line and
    every line of the turn."""
    start = len(child.seen)
    await child.send(user(text))
    while True:
        line = await child.next(lambda m: m.get("type") in ("result", "control_request"), timeout_s)
        if line["type"] == "result":
            return line, child.seen[start:]
        request = line["request"]
        assert request["subtype"] == "can_use_tool", line
        assert decide is not None, f"unexpected permission request {line}"
        answer = dict(decide)
        if answer["behavior"] == "allow":
            answer["updatedInput"] = request["input"]
        await child.send(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": line["request_id"],
                    "response": answer,
                },
            }
        )


async def test_claude_code_streams_a_text_turn_and_a_thinking_turn_in_one_session(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.claude_code(place.home, place.cwd, fake.url)) as child:
        timings.start()
        result, lines = await run_turn(child, "Say hi [[reply: hi there]]")
        timings.stop("text turn (with start)")
        assert result["subtype"] == "success" and result["result"] == "hi there"
        init = next(m for m in lines if m.get("subtype") == "init")
        assert init["session_id"] == result["session_id"]
        assert deltas(lines, "text_delta") == "hi there"

        timings.start()
        result, lines = await run_turn(child, "Ponder [[think: a deep thought]] [[reply: 42]]")
        timings.stop("thinking turn")
        assert result["subtype"] == "success" and result["result"] == "42"
        assert deltas(lines, "thinking_delta") == "a deep thought"
        # One assistant line per content block, all under one message id.
        blocks = [m for m in lines if m.get("type") == "assistant"]
        assert [b["message"]["content"][0]["type"] for b in blocks] == ["thinking", "text"]
        assert len({b["message"]["id"] for b in blocks}) == 1

    calls = fake.model_calls()
    assert [c.target for c in calls] == ["/v1/messages?beta=true"] * 2
    assert all(c.body["model"] == programs.CLAUDE_MODEL and c.body["stream"] for c in calls)


async def test_claude_code_asks_before_running_a_command_and_runs_it_when_allowed(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url, *STDIO_PERMISSIONS)
    async with spawn(program) as child:
        timings.start()
        prompt = "[[shell: touch made-by-claude && echo ran]] [[reply: the command ran]]"
        result, lines = await run_turn(child, prompt, {"behavior": "allow"})
        timings.stop("tool turn, allowed")

    assert result["subtype"] == "success" and result["result"] == "the command ran"
    assert (place.cwd / "made-by-claude").exists()
    asks = [m for m in lines if m.get("type") == "control_request"]
    assert [a["request"]["tool_name"] for a in asks] == ["Bash"]
    calls = fake.model_calls()
    assert [c.answer for c in calls] == ["tool", "text"]
    assert calls[1].tool_results[0].startswith("ran")


async def test_claude_code_reports_a_denied_command_to_the_model_and_finishes_the_turn(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url, *STDIO_PERMISSIONS)
    async with spawn(program) as child:
        timings.start()
        prompt = "[[write: {}]] [[reply: fine, not written]]".format(place.cwd / "no.txt")
        result, _ = await run_turn(child, prompt, {"behavior": "deny", "message": "not today"})
        timings.stop("tool turn, denied")

    assert result["subtype"] == "success" and result["result"] == "fine, not written"
    assert not (place.cwd / "no.txt").exists()
    assert "not today" in fake.model_calls()[1].tool_results[0]


async def test_claude_code_interrupt_cuts_a_slow_stream_and_ends_the_turn(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.claude_code(place.home, place.cwd, fake.url)) as child:
        await child.send(user("Count slowly [[slow]]"))
        await child.next(lambda m: m.get("event", {}).get("type") == "content_block_delta")
        timings.start()
        await child.send(
            {"type": "control_request", "request_id": "int-1", "request": {"subtype": "interrupt"}}
        )
        ack = await child.next(lambda m: m.get("type") == "control_response")
        result = await child.next(lambda m: m.get("type") == "result")
        timings.stop("interrupt -> result")
        assert ack["response"]["subtype"] == "success"
        assert result["subtype"] == "error_during_execution"

        # The session goes on after an interrupt.
        result, _ = await run_turn(child, "Again [[reply: back]]")
        assert result["result"] == "back"

    cut = fake.model_calls()[0]
    await asyncio.to_thread(fake.wait_for, lambda _: cut.ended_s > 0)
    assert not cut.finished


async def test_claude_code_turns_a_model_http_error_into_an_error_result_without_retrying(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.claude_code(place.home, place.cwd, fake.url)) as child:
        timings.start()
        result, _ = await run_turn(child, "Fail [[error: 500 upstream exploded]]")
        timings.stop("error turn")

    assert result["is_error"] is True
    assert "upstream exploded" in str(result)
    assert [c.status for c in fake.model_calls()] == [500]


async def test_claude_code_resumes_a_session_in_a_new_process_with_its_history(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.claude_code(place.home, place.cwd, fake.url)) as child:
        first, _ = await run_turn(child, "First [[reply: one]]")
    session_id = first["session_id"]
    program = programs.claude_code(place.home, place.cwd, fake.url, "--resume", session_id)
    async with spawn(program) as child:
        timings.start()
        result, _ = await run_turn(child, "Second [[reply: two]]")
        timings.stop("resumed turn (with start)")

    assert result["session_id"] == session_id and result["result"] == "two"
    roles = [m["role"] for m in fake.model_calls()[-1].body["messages"]]
    assert roles == ["user", "assistant", "user"]
