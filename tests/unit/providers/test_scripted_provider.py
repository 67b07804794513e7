"""The scripted provider's sessions: events, chunking, sleeps, failures, interrupts, close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from corral_server.clock import FakeClock
from corral_server.domain.agent import AgentError, PermissionBehavior, PermissionResponse, Usage
from corral_server.domain.content import ImagePart, Prompt, TextPart
from corral_server.domain.timeline import AssistantMessage, Reasoning, ToolCall, ToolCallStatus
from corral_server.errors import (
    AgentBusy,
    AgentClosed,
    FailedPrecondition,
    InvalidArgument,
    Unimplemented,
)
from corral_server.providers.base import (
    InterruptResult,
    Provider,
    ProviderEvent,
    ProviderItem,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderSession,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.scripted_provider import ScriptedProvider, ScriptedSession

TERMINAL = (ProviderTurnCompleted, ProviderTurnFailed, ProviderTurnCanceled)


class Recorder:
    """An event sink that tests can wait on. Optionally raises on one event type, to stand
    in for a broken manager."""

    def __init__(self, raise_on: type | None = None) -> None:
        self.events: list[ProviderEvent] = []
        self._raise_on = raise_on
        self._changed = asyncio.Event()

    def __call__(self, event: ProviderEvent) -> None:
        self.events.append(event)
        self._changed.set()
        if self._raise_on is not None and isinstance(event, self._raise_on):
            raise RuntimeError("sink exploded")

    async def wait_for(self, predicate: Callable[[list[ProviderEvent]], bool]) -> None:
        # The timeout is a guard against a hung test, not synchronisation.
        async with asyncio.timeout(5):
            while not predicate(self.events):
                self._changed.clear()
                await self._changed.wait()

    async def terminal(self) -> ProviderEvent:
        await self.wait_for(lambda events: any(isinstance(e, TERMINAL) for e in events))
        return self.events[-1]

    def items(self) -> list[ProviderItem]:
        return [e for e in self.events if isinstance(e, ProviderItem)]


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run (no wall-clock sleep) until `condition` holds."""
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def text(value: str) -> Prompt:
    return (TextPart(value),)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def provider(clock: FakeClock) -> ScriptedProvider:
    return ScriptedProvider(clock)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def session(provider: ScriptedProvider, recorder: Recorder) -> AsyncIterator[ScriptedSession]:
    opened = await provider.create_session(SessionConfig(agent_id="a1", cwd="/tmp"), recorder)
    yield opened
    # No test leaves a turn task behind for the loop to destroy.
    await opened.close()


async def run_turn(session: ScriptedSession, recorder: Recorder, prompt: str) -> str:
    turn_id = await session.start_turn(text(prompt))
    await recorder.terminal()
    return turn_id


def reply_texts(recorder: Recorder) -> dict[str, str]:
    """Assistant chunks joined per provider message id, in first-seen order."""
    joined: dict[str, str] = {}
    for event in recorder.items():
        if isinstance(event.item, AssistantMessage):
            key = event.provider_message_id
            joined[key] = joined.get(key, "") + event.item.text
    return joined


# --- the provider ------------------------------------------------------------------------


def test_provider_satisfies_the_provider_protocols(provider: ScriptedProvider) -> None:
    checked: Provider = provider
    assert checked.name == "scripted"


async def test_session_satisfies_the_session_protocol(session: ScriptedSession) -> None:
    checked: ProviderSession = session
    assert checked.session_id.startswith("scripted-")


def test_info_reports_an_available_builtin_with_modes_and_models(clock: FakeClock) -> None:
    info = ScriptedProvider(clock, name="demo").info()
    assert (info.name, info.kind, info.available) == ("demo", "scripted", True)
    assert {m.id for m in info.modes} == {"default", "plan"}
    assert [m.id for m in info.models] == ["scripted-1"]


async def test_each_session_gets_its_own_id(provider: ScriptedProvider) -> None:
    config = SessionConfig(agent_id="a", cwd="/")
    first = await provider.create_session(config, Recorder())
    second = await provider.create_session(config, Recorder())
    assert first.session_id != second.session_id


def test_validate_prompt_accepts_a_runnable_script(provider: ScriptedProvider) -> None:
    provider.validate_prompt(text('hi\n/think t\n/tool x {"a": 1}\n/sleep 3\n/refuse-interrupt'))


@pytest.mark.parametrize("prompt", ["/foo", "/sleep later", "/tool t {bad", ""])
def test_validate_prompt_rejects_malformed_scripts(provider: ScriptedProvider, prompt: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        provider.validate_prompt(text(prompt))
    assert caught.value.violations[0].field == "content"


def test_validate_prompt_rejects_an_image_only_prompt(provider: ScriptedProvider) -> None:
    with pytest.raises(InvalidArgument):
        provider.validate_prompt((ImagePart("image/png", b"\x89PNG"),))


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("/spawn do it", "/spawn needs the subagents capability, not yet delivered"),
    ],
)
def test_validate_prompt_names_the_capability_a_directive_still_lacks(
    provider: ScriptedProvider, prompt: str, message: str
) -> None:
    with pytest.raises(Unimplemented) as caught:
        provider.validate_prompt(text(f"hello\n{prompt}"))
    assert caught.value.message == message


def test_validate_prompt_reads_every_text_part(provider: ScriptedProvider) -> None:
    with pytest.raises(InvalidArgument):
        provider.validate_prompt((TextPart("hello"), TextPart("/nope")))


# --- turns -------------------------------------------------------------------------------


async def test_plain_text_gets_you_said_streamed_in_chunks_of_one_message(
    session: ScriptedSession, recorder: Recorder
) -> None:
    turn_id = await run_turn(session, recorder, "please fix the flaky build today")
    items = recorder.items()
    assert len(items) >= 3
    assert len({item.provider_message_id for item in items}) == 1
    assert all(isinstance(i.item, AssistantMessage) and i.turn_id == turn_id for i in items)
    assert list(reply_texts(recorder).values()) == ["You said: please fix the flaky build today"]


async def test_a_turn_starts_first_and_ends_with_exactly_one_completion_and_usage(
    session: ScriptedSession, recorder: Recorder
) -> None:
    turn_id = await run_turn(session, recorder, "one two three")
    assert recorder.events[0] == ProviderTurnStarted(turn_id)
    assert [e for e in recorder.events if isinstance(e, TERMINAL)] == [
        ProviderTurnCompleted(turn_id, usage=Usage(input_tokens=3, output_tokens=5))
    ]
    assert isinstance(recorder.events[-1], ProviderTurnCompleted)


async def test_turn_ids_are_fresh_for_every_turn(
    session: ScriptedSession, recorder: Recorder
) -> None:
    first = await run_turn(session, recorder, "one")
    recorder.events.clear()
    second = await run_turn(session, recorder, "two")
    assert first.startswith("turn-") and second.startswith("turn-") and first != second


async def test_reply_directives_replace_the_default_and_each_is_its_own_message(
    session: ScriptedSession, recorder: Recorder
) -> None:
    await run_turn(session, recorder, "ignored text\n/reply first answer here\n/reply second")
    assert list(reply_texts(recorder).values()) == ["first answer here", "second"]
    completed = recorder.events[-1]
    assert isinstance(completed, ProviderTurnCompleted)
    assert completed.usage == Usage(input_tokens=2, output_tokens=4)


async def test_think_reports_one_reasoning_item(
    session: ScriptedSession, recorder: Recorder
) -> None:
    await run_turn(session, recorder, "/think mulling it over\n/reply done")
    reasoning = [i for i in recorder.items() if isinstance(i.item, Reasoning)]
    assert [r.item for r in reasoning] == [Reasoning("mulling it over")]
    assert reasoning[0].provider_message_id not in reply_texts(recorder)


async def test_tool_goes_running_then_completed_under_one_call_id(
    session: ScriptedSession, recorder: Recorder
) -> None:
    await run_turn(session, recorder, '/tool read_file {"path": "a.txt"}\n/reply ok')
    calls = [i.item for i in recorder.items() if isinstance(i.item, ToolCall)]
    assert [c.status for c in calls] == [ToolCallStatus.RUNNING, ToolCallStatus.COMPLETED]
    assert calls[0].call_id == calls[1].call_id
    assert all(c.name == "read_file" and c.input == {"path": "a.txt"} for c in calls)
    assert calls[1].output == {"ok": True, "tool": "read_file"}


async def test_steps_report_in_script_order_and_the_default_reply_comes_last(
    session: ScriptedSession, recorder: Recorder
) -> None:
    await run_turn(session, recorder, "/think a\n/tool t\nhi there\n/think b")
    kinds: list[str] = []
    for event in recorder.events:
        name = type(event.item).__name__ if isinstance(event, ProviderItem) else None
        label = name or type(event).__name__
        if not kinds or kinds[-1] != label:
            kinds.append(label)
    assert kinds == [
        "ProviderTurnStarted",
        "Reasoning",
        "ToolCall",
        "Reasoning",
        "AssistantMessage",
        "ProviderTurnCompleted",
    ]
    assert list(reply_texts(recorder).values()) == ["You said: hi there"]


async def test_a_prompt_of_only_quiet_directives_still_gets_a_default_reply(
    session: ScriptedSession, recorder: Recorder
) -> None:
    await run_turn(session, recorder, "/think quietly")
    assert list(reply_texts(recorder).values()) == ["You said nothing."]


async def test_sleep_waits_until_the_clock_reaches_its_deadline(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    await session.start_turn(text("/sleep 500\n/reply awake"))
    await until(lambda: clock.pending_timers == 1)
    await clock.advance(499)
    assert recorder.items() == []
    assert not any(isinstance(e, TERMINAL) for e in recorder.events)
    await clock.advance(1)
    assert isinstance(await recorder.terminal(), ProviderTurnCompleted)
    assert list(reply_texts(recorder).values()) == ["awake"]


async def test_fail_ends_the_turn_with_its_message_and_skips_later_steps(
    session: ScriptedSession, recorder: Recorder
) -> None:
    turn_id = await run_turn(session, recorder, "/think before\n/fail disk on fire\n/reply never")
    assert [i.item for i in recorder.items()] == [Reasoning("before")]
    assert recorder.events[-1] == ProviderTurnFailed(
        turn_id, AgentError("disk on fire", code="SCRIPTED_FAILURE")
    )
    assert sum(isinstance(e, TERMINAL) for e in recorder.events) == 1


async def test_a_second_turn_while_one_runs_is_busy(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    running = await session.start_turn(text("/sleep 10"))
    with pytest.raises(AgentBusy) as caught:
        await session.start_turn(text("again"))
    assert caught.value.metadata == {"agent_id": "a1", "turn_id": running}
    await until(lambda: clock.pending_timers == 1)
    await clock.advance(10)
    await recorder.terminal()
    await session.start_turn(text("now free"))


@pytest.mark.parametrize("prompt", ["/bogus", "/spawn task"])
async def test_an_unvalidated_bad_prompt_fails_the_turn_instead_of_raising(
    session: ScriptedSession, recorder: Recorder, prompt: str
) -> None:
    turn_id = await run_turn(session, recorder, prompt)
    assert recorder.events[0] == ProviderTurnStarted(turn_id)
    failed = recorder.events[-1]
    assert isinstance(failed, ProviderTurnFailed)
    assert failed.error.code == "PROVIDER_ERROR"
    assert len(recorder.events) == 2


async def test_an_exception_inside_the_turn_becomes_a_provider_error(
    provider: ScriptedProvider,
) -> None:
    recorder = Recorder(raise_on=ProviderItem)
    session = await provider.create_session(SessionConfig(agent_id="a", cwd="/"), recorder)
    await run_turn(session, recorder, "/reply hi")
    failed = recorder.events[-1]
    assert isinstance(failed, ProviderTurnFailed)
    assert failed.error.code == "PROVIDER_ERROR"
    assert "sink exploded" in failed.error.message
    await session.start_turn(text("the session is usable again"))


# --- interrupt and close -----------------------------------------------------------------


async def test_interrupt_with_no_turn_is_not_running_and_reports_nothing(
    session: ScriptedSession, recorder: Recorder
) -> None:
    assert await session.interrupt("") is InterruptResult.NOT_RUNNING
    await run_turn(session, recorder, "done")
    count = len(recorder.events)
    assert await session.interrupt("") is InterruptResult.NOT_RUNNING
    assert len(recorder.events) == count


async def test_confirmed_interrupt_cancels_once_and_stops_the_script(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    turn_id = await session.start_turn(text("/think first\n/sleep 1000\n/reply late"))
    await until(lambda: clock.pending_timers == 1)
    assert await session.interrupt("") is InterruptResult.CONFIRMED
    assert clock.pending_timers == 0
    await clock.advance(1000)
    assert [type(e) for e in recorder.events] == [
        ProviderTurnStarted,
        ProviderItem,
        ProviderTurnCanceled,
    ]
    assert recorder.events[-1] == ProviderTurnCanceled(turn_id, reason="interrupted")


async def test_interrupt_before_the_script_runs_still_follows_the_start(
    session: ScriptedSession, recorder: Recorder
) -> None:
    turn_id = await session.start_turn(text("/reply never"))
    assert await session.interrupt("") is InterruptResult.CONFIRMED
    assert recorder.events == [
        ProviderTurnStarted(turn_id),
        ProviderTurnCanceled(turn_id, reason="interrupted"),
    ]


async def test_concurrent_interrupts_report_a_single_cancel(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    await session.start_turn(text("/sleep 1000"))
    await until(lambda: clock.pending_timers == 1)
    first, second = await asyncio.gather(session.interrupt(""), session.interrupt(""))
    assert {first, second} == {InterruptResult.CONFIRMED, InterruptResult.NOT_RUNNING}
    assert sum(isinstance(e, ProviderTurnCanceled) for e in recorder.events) == 1


async def test_refused_interrupt_returns_false_and_the_turn_completes(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    await session.start_turn(text("/refuse-interrupt\n/sleep 1000\n/reply finished"))
    await until(lambda: clock.pending_timers == 1)
    assert await session.interrupt("") is InterruptResult.REFUSED
    await clock.advance(1000)
    assert isinstance(await recorder.terminal(), ProviderTurnCompleted)
    assert not any(isinstance(e, ProviderTurnCanceled) for e in recorder.events)
    assert list(reply_texts(recorder).values()) == ["finished"]


async def test_interrupts_before_refuse_interrupt_is_reached_are_confirmed(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    await session.start_turn(text("/sleep 10\n/refuse-interrupt\n/reply x"))
    await until(lambda: clock.pending_timers == 1)
    assert await session.interrupt("") is InterruptResult.CONFIRMED
    assert isinstance(recorder.events[-1], ProviderTurnCanceled)


async def test_refusal_lasts_only_for_its_own_turn(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    await run_turn(session, recorder, "/refuse-interrupt\n/reply first")
    await session.start_turn(text("/sleep 10"))
    await until(lambda: clock.pending_timers == 1)
    assert await session.interrupt("") is InterruptResult.CONFIRMED


async def test_an_interrupt_for_an_earlier_turn_never_stops_the_running_one(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    first = await run_turn(session, recorder, "/reply first")
    await session.start_turn(text("/sleep 10\n/reply second"))
    await until(lambda: clock.pending_timers == 1)
    assert await session.interrupt(first) is InterruptResult.NOT_RUNNING
    await clock.advance(10)
    await recorder.wait_for(lambda events: sum(isinstance(e, TERMINAL) for e in events) == 2)
    assert isinstance(recorder.events[-1], ProviderTurnCompleted)
    assert not any(isinstance(e, ProviderTurnCanceled) for e in recorder.events)
    assert list(reply_texts(recorder).values()) == ["first", "second"]


async def test_a_permission_step_waits_for_its_answer_then_completes_or_fails_the_tool(
    session: ScriptedSession, recorder: Recorder
) -> None:
    turn_id = await session.start_turn(text("/permission write\n/permission rm\n/reply done"))
    await recorder.wait_for(
        lambda events: any(isinstance(e, ProviderPermissionRequested) for e in events)
    )
    asked = next(e for e in recorder.events if isinstance(e, ProviderPermissionRequested))
    assert asked.permission.name == "write" and asked.permission.turn_id == turn_id
    assert [a.id for a in asked.permission.actions] == ["allow", "deny"]
    await session.respond_permission(
        turn_id, asked.permission.id, PermissionResponse(PermissionBehavior.ALLOW)
    )
    await recorder.wait_for(
        lambda events: sum(isinstance(e, ProviderPermissionRequested) for e in events) == 2
    )
    second = [e for e in recorder.events if isinstance(e, ProviderPermissionRequested)][1]
    with pytest.raises(FailedPrecondition):  # an answer for a request no longer waiting
        await session.respond_permission(
            turn_id, asked.permission.id, PermissionResponse(PermissionBehavior.ALLOW)
        )
    await session.respond_permission(
        turn_id, second.permission.id, PermissionResponse(PermissionBehavior.DENY, message="no")
    )
    assert isinstance(await recorder.terminal(), ProviderTurnCompleted)
    tools = [e.item for e in recorder.items() if isinstance(e.item, ToolCall)]
    finals = {t.name: t for t in tools if t.status.is_terminal}
    assert finals["write"].status is ToolCallStatus.COMPLETED
    assert (
        finals["rm"].status is ToolCallStatus.FAILED
        and finals["rm"].error == "permission denied: no"
    )
    resolved = [e for e in recorder.events if isinstance(e, ProviderPermissionResolved)]
    assert [r.behavior for r in resolved] == [PermissionBehavior.ALLOW, PermissionBehavior.DENY]


async def test_close_stops_the_turn_without_reporting_anything_more(
    session: ScriptedSession, recorder: Recorder, clock: FakeClock
) -> None:
    turn_id = await session.start_turn(text("/sleep 1000\n/reply late"))
    await until(lambda: clock.pending_timers == 1)
    # A guard, not synchronisation: a close that forgot to cancel would wait for ever.
    async with asyncio.timeout(5):
        await session.close()
    assert clock.pending_timers == 0
    await clock.advance(1000)
    assert recorder.events == [ProviderTurnStarted(turn_id)]
    assert await session.interrupt(turn_id) is InterruptResult.NOT_RUNNING
    assert recorder.events == [ProviderTurnStarted(turn_id)]


async def test_a_closed_session_refuses_new_turns(session: ScriptedSession) -> None:
    await session.close()
    with pytest.raises(AgentClosed):
        await session.start_turn(text("hello"))
