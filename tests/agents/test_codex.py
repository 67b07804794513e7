"""Codex (`codex app-server`, JSON-RPC lines) runs whole turns offline against the fake OpenAI
Responses API: text, reasoning, a command and a patch behind approval requests (accepted and
declined), interrupt, and a model HTTP error."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.agents import programs
from tests.agents.conftest import Place, Spawn, Timings
from tests.agents.drivers import CodexDriver
from tests.support.fake_models import FakeModelServer


async def turn(codex: CodexDriver, thread_id: str, text: str) -> dict[str, Any]:
    turn_id = await codex.start_turn(thread_id, text)
    done = await codex.until("turn/completed")
    assert done["params"]["turn"]["id"] == turn_id
    turn: dict[str, Any] = done["params"]["turn"]
    return turn


def agent_text(codex: CodexDriver) -> str:
    return "".join(d["delta"] for d in codex.of("item/agentMessage/delta"))


async def test_codex_streams_a_text_turn_and_a_reasoning_turn_in_one_thread(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child)
        timings.start()
        thread_id = await codex.start_thread(place.cwd)
        timings.stop("start")
        timings.start()
        done = await turn(codex, thread_id, "Say hi [[reply: hi from codex]]")
        timings.stop("text turn")
        assert done["status"] == "completed"
        assert agent_text(codex) == "hi from codex"

        codex.notifications.clear()
        timings.start()
        done = await turn(codex, thread_id, "Ponder [[think: deep]] [[reply: 42]]")
        timings.stop("reasoning turn")
        assert done["status"] == "completed"
        summary = "".join(d["delta"] for d in codex.of("item/reasoning/summaryTextDelta"))
        assert summary == "deep" and agent_text(codex) == "42"
        usage = codex.of("thread/tokenUsage/updated")[-1]["tokenUsage"]
        assert usage["total"]["totalTokens"] == 30  # two model calls of 15 tokens each

    calls = fake.model_calls()
    assert [c.path for c in calls] == ["/v1/responses"] * 2
    assert all(c.body["model"] == programs.CODEX_MODEL and c.body["stream"] for c in calls)


async def test_codex_asks_approval_for_a_command_and_a_patch_and_applies_them_when_accepted(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child, decision="accept")
        thread_id = await codex.start_thread(place.cwd)
        timings.start()
        prompt = (
            "[[shell: touch made-by-codex && echo ran]] [[write: {}]] [[reply: the command ran]]"
        ).format(place.cwd / "patched.txt")
        done = await turn(codex, thread_id, prompt)
        timings.stop("tool turn, accepted")

    assert done["status"] == "completed" and agent_text(codex) == "the command ran"
    assert (place.cwd / "made-by-codex").exists()
    [approval, patch] = codex.approvals
    assert approval["method"] == "item/commandExecution/requestApproval"
    assert "accept" in approval["params"]["availableDecisions"]
    assert patch["method"] == "item/fileChange/requestApproval"
    assert (place.cwd / "patched.txt").read_text() == "written by the fake model\n"
    executed = [
        p["item"] for p in codex.of("item/completed") if p["item"]["type"] == "commandExecution"
    ]
    assert executed[0]["exitCode"] == 0 and executed[0]["aggregatedOutput"] == "ran\n"
    assert "ran" in fake.model_calls()[1].tool_results[0]


async def test_codex_does_not_run_a_declined_command_and_finishes_the_turn(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child, decision="decline")
        thread_id = await codex.start_thread(place.cwd)
        timings.start()
        done = await turn(codex, thread_id, "[[shell: touch nope]] [[reply: fine]]")
        timings.stop("tool turn, declined")

    assert done["status"] == "completed" and agent_text(codex) == "fine"
    assert not (place.cwd / "nope").exists()
    assert len(codex.approvals) == 1


async def test_codex_interrupt_cuts_a_slow_stream_and_ends_the_turn_as_interrupted(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child)
        thread_id = await codex.start_thread(place.cwd)
        turn_id = await codex.start_turn(thread_id, "Count slowly [[slow]]")
        await codex.until("item/agentMessage/delta")
        timings.start()
        await codex.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        done = await codex.until("turn/completed")
        timings.stop("interrupt -> turn/completed")
        assert done["params"]["turn"]["status"] == "interrupted"

        codex.notifications.clear()
        again = await turn(codex, thread_id, "Again [[reply: back]]")
        assert again["status"] == "completed" and agent_text(codex) == "back"

    cut = fake.model_calls()[0]
    await asyncio.to_thread(fake.wait_for, lambda _: cut.ended_s > 0)
    assert not cut.finished


async def test_codex_fails_the_turn_on_a_model_http_error_without_retrying(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child)
        thread_id = await codex.start_thread(place.cwd)
        timings.start()
        done = await turn(codex, thread_id, "Fail [[error: 500 upstream exploded]]")
        timings.stop("error turn")

    assert done["status"] == "failed"
    # Codex shows its own words for a 500, not the body's message.
    assert done["error"]["codexErrorInfo"] == "internalServerError"
    assert codex.of("error")[-1]["willRetry"] is False
    assert [c.status for c in fake.model_calls()] == [500]


async def test_codex_resumes_a_thread_in_a_new_process_with_its_history(
    fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child)
        thread_id = await codex.start_thread(place.cwd)
        await turn(codex, thread_id, "First [[reply: one]]")
    async with spawn(programs.codex(place.home, place.cwd, fake.url)) as child:
        codex = CodexDriver(child)
        timings.start()
        await codex.request("initialize", {"clientInfo": {"name": "corral-smoke", "version": "0"}})
        await codex.child.send({"method": "initialized"})
        resumed = await codex.request("thread/resume", {"threadId": thread_id})
        done = await turn(codex, thread_id, "Second [[reply: two]]")
        timings.stop("resume + turn")

    assert resumed["thread"]["id"] == thread_id
    assert done["status"] == "completed" and agent_text(codex) == "two"
    texts = [
        c["text"]
        for item in fake.model_calls()[-1].body["input"]
        if item.get("type") == "message"
        for c in item["content"]
    ]
    assert "First [[reply: one]]" in texts and "one" in texts
