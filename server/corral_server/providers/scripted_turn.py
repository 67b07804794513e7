"""One turn of the built-in `scripted` provider, played step by step (`TurnPlayer`).

This module owns what a parsed `Script` (script_parser.py) does when it runs: replies streamed
in chunks, thinking, tool calls, permissions and follow-ups, sleeps on the injected clock,
sub-agent spawns and history replays. It reports through the emit function it was given and
never ends the turn itself: `scripted_session.py` reports the one terminal event.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeAlias, assert_never

from corral_server.clock import Clock
from corral_server.domain.agent import (
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
    PermissionResponse,
    Usage,
)
from corral_server.domain.timeline import (
    AssistantMessage,
    JsonValue,
    Reasoning,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.errors import CorralError, Unimplemented
from corral_server.providers import script_steps as steps
from corral_server.providers.base import (
    ProviderEvent,
    ProviderItem,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderTitle,
    ProviderTurnCompleted,
)
from corral_server.providers.script_parser import parse_script

# A reply is streamed in at most this many chunks: enough to exercise the coalescer, few
# enough that a short reply stays readable in a raw event log.
MAX_REPLY_CHUNKS = 4

_WORD = re.compile(r"\s*\S+")

# `/spawn <task>`: spawn a sub-agent of `agent_id` on `task` (the daemon sets it to the
# sub-agent registry's spawn); returns (run id, child agent id), raises CorralError refusals.
Spawner: TypeAlias = Callable[[str, str], Awaitable[tuple[str, str]]]


def require_delivered(script: steps.Script, *, can_spawn: bool = False) -> None:
    """Raise `Unimplemented` naming the first directive this server cannot run yet."""
    for step in script.all_steps():
        if isinstance(step, steps.Spawn) and not can_spawn:
            raise undelivered(step)


def undelivered(step: steps.Spawn) -> Unimplemented:
    # The grammar already knows this directive; its capability comes in a later release.
    directive, capability = "/spawn", "subagents"
    return Unimplemented(
        f"{directive} needs the {capability} capability, not yet delivered",
        metadata={"directive": directive, "capability": capability},
    )


class ScriptFailed(Exception):
    """Raised by a `/fail` step; ends the turn with SCRIPTED_FAILURE."""


@dataclass(slots=True)
class ScriptedRun:
    """The running turn. Mutable, and owned by its session."""

    # The id its events carry: "" for an id-less autonomous turn (`/autonomous no-id`).
    turn_id: str
    # The text an `/echo` reports back, and what the turn runs: parsed by its task (a
    # prompt that skipped validation fails the turn, never start_turn).
    text: str
    # Prefix of the message, call and request ids it reports: never empty.
    tag: str
    script: steps.Script | None = None
    task: asyncio.Task[None] = field(init=False)
    # Set by a `/refuse-interrupt` step: later interrupts return REFUSED.
    refusing: bool = False
    # Set by a `/hang-interrupt` step: later interrupts never answer (until close).
    hanging: bool = False
    # How the terminal is reported (`/terminal-without-id`, `/duplicate-terminal`), and the
    # finished turns replayed after it (`/replay-turn`).
    terminal_without_id: bool = False
    duplicate_terminal: bool = False
    replays: list[str] = field(default_factory=list)
    # The message id of the turn's latest reply, which a `/reply+` continues.
    last_message: str = ""
    # The session's earlier prompts, oldest first (what a `/recall` replies).
    earlier: tuple[str, ...] = ()
    # Scripts of prompts steered into the turn (a `can_steer` provider), run after its own.
    steered: list[steps.Script] = field(default_factory=list)
    # What a `/settings` step replies: the session's model and mode when the turn started.
    settings: str = ""
    # The permission the turn waits on, by request id: set by its answer; with the follow-up
    # prompt an ALLOW answer asks for ("" for none).
    asking: dict[str, tuple[asyncio.Future[PermissionResponse], str]] = field(default_factory=dict)


class TurnPlayer:
    """Plays one run's script (and what is steered into it) through `emit`."""

    def __init__(
        self,
        run: ScriptedRun,
        emit: Callable[[ProviderEvent], None],
        clock: Clock,
        spawner: Spawner | None,
        agent_id: str,
    ) -> None:
        self._run = run
        self._emit = emit
        self._clock = clock
        self._spawner = spawner
        self._agent_id = agent_id

    async def play(self) -> ProviderTurnCompleted:
        run = self._run
        script = run.script = run.script or parse_script(run.text)
        require_delivered(script, can_spawn=self._spawner is not None)
        output_words = await self._play_script(run, script, 0)
        input_words = len(script.text.split())
        first = len(script.steps) + 1  # the index of the first steered step
        while run.steered:
            steered = run.steered.pop(0)
            output_words += await self._play_script(run, steered, first)
            input_words += len(steered.text.split())
            first += len(steered.steps) + 1
        usage = Usage(input_tokens=input_words, output_tokens=output_words)
        return ProviderTurnCompleted(run.turn_id, usage=usage)

    async def _play_script(self, run: ScriptedRun, script: steps.Script, first: int) -> int:
        """Run `script`'s steps (numbered from `first`), then its default reply; return how
        many words of reply they produced."""
        output_words = 0
        for index, step in enumerate(script.steps, start=first):
            # Between steps the loop runs other work, and an interrupt can land.
            await asyncio.sleep(0)
            output_words += await self._play_step(run, step, index)
        if script.needs_default_reply:
            await asyncio.sleep(0)
            reply = default_reply(script.text)
            output_words += self._stream_reply(run, reply, first + len(script.steps))
        return output_words

    async def _play_step(self, run: ScriptedRun, step: steps.Step, index: int) -> int:
        """Run one step; return how many words of reply it produced."""
        match step:
            case steps.Reply(text=text, continues=continues):
                return self._stream_reply(run, text, index, continues)
            case steps.Think(text=text):
                message_id = f"{run.tag}-think-{index}"
                self._emit(ProviderItem(run.turn_id, Reasoning(text), message_id))
            case steps.Tool():
                await self._call_tool(run, step, index)
            case steps.Sleep(ms=ms):
                await self._clock.sleep(ms / 1000)
            case steps.Fail(message=message):
                raise ScriptFailed(message)
            case steps.RefuseInterrupt():
                run.refusing = True
            case steps.HangInterrupt():
                run.hanging = True
            case steps.TerminalWithoutId():
                run.terminal_without_id = True
            case steps.DuplicateTerminal():
                run.duplicate_terminal = True
            case steps.ReplayTurn(turn_id=turn_id):
                run.replays.append(turn_id)
            case steps.Permission(name=name):
                await self._ask(run, index, (name,))
            case steps.Permissions(count=count, input_bytes=size):
                names = tuple(f"permission-{n}" for n in range(1, count + 1))
                await self._ask(run, index, names, input_bytes=size)
            case steps.FollowUp(text=text):
                await self._ask(run, index, ("follow-up",), follow_up=text)
            case steps.Echo():
                # As a real agent does: the prompt back, under the provider's own message id.
                echo_id = f"{run.tag}-user"
                echo = UserMessage(run.text, message_id=echo_id)
                self._emit(ProviderItem(run.turn_id, echo, provider_message_id=echo_id))
            case steps.Recall():
                return self._stream_reply(run, "\n".join(run.earlier) or "(nothing)", index)
            case steps.Spawn(task=task):
                await self._spawn(run, task, index)
            case steps.History(count=count):
                self._replay_history(run, count, index)
            case steps.Title(text=text):
                self._emit(ProviderTitle(text))
            case steps.Settings():
                return self._stream_reply(run, run.settings, index)
            case _:
                assert_never(step)
        return 0

    def _replay_history(self, run: ScriptedRun, count: int, index: int) -> None:
        """`/history N`: N items of an earlier conversation, flagged `from_history` as a
        resumed session replays them. They name the running turn on purpose: corral must
        store them outside it anyway (docs/design.md#resume)."""
        for number in range(1, count + 1):
            message_id = f"{run.tag}-history-{index}-{number}"
            item: UserMessage | AssistantMessage
            if number % 2:
                item = UserMessage(f"earlier prompt {number}", message_id=message_id)
            else:
                item = AssistantMessage(f"earlier reply {number}", message_id=message_id)
            self._emit(ProviderItem(run.turn_id, item, message_id, from_history=True))

    async def _spawn(self, run: ScriptedRun, task: str, index: int) -> None:
        """`/spawn TASK`: a `spawn_subagent` tool call that completes with the new run and
        child, or fails with the refusal (a limit, say); the turn goes on either way."""
        spawner = self._spawner
        if spawner is None:  # validated before the turn; the daemon lost its registry since
            raise undelivered(steps.Spawn(task))
        call_id = f"{run.tag}-call-{index}"
        name = "spawn_subagent"
        given: JsonValue = {"task": task}
        running = ToolCall(call_id, name, ToolCallStatus.RUNNING, given)
        self._emit(ProviderItem(run.turn_id, running))
        try:
            run_id, child_id = await spawner(self._agent_id, task)
        except CorralError as refused:
            failed = ToolCall(call_id, name, ToolCallStatus.FAILED, given, error=refused.message)
            self._emit(ProviderItem(run.turn_id, failed))
            return
        output: JsonValue = {"run_id": run_id, "child_agent_id": child_id}
        done = ToolCall(call_id, name, ToolCallStatus.COMPLETED, given, output=output)
        self._emit(ProviderItem(run.turn_id, done))

    async def _ask(
        self,
        run: ScriptedRun,
        index: int,
        names: tuple[str, ...],
        follow_up: str = "",
        input_bytes: int = 0,
    ) -> None:
        """`/permission NAME`: a tool call that waits for a permission; allowed, it
        completes; denied, it fails with the answer's message. `/permissions N` asks N at
        once (the turn goes on when all are answered). `/follow-up TEXT` is one request,
        whose ALLOW answer also asks for TEXT as a follow-up prompt."""
        asked: list[tuple[str, str, str, asyncio.Future[PermissionResponse]]] = []
        given: dict[str, JsonValue] = {"content": "x" * input_bytes} if input_bytes else {}
        try:
            for number, name in enumerate(names, start=1):
                suffix = f"{index}" if len(names) == 1 else f"{index}-{number}"
                call_id = f"{run.tag}-call-{suffix}"
                request_id = f"{run.tag}-permission-{suffix}"
                answer = self._request(run, name, call_id, request_id, follow_up, given)
                asked.append((name, call_id, request_id, answer))
            for name, call_id, request_id, answer in asked:
                self._settled(run, name, call_id, request_id, await answer)
        finally:
            for _, _, request_id, _ in asked:
                run.asking.pop(request_id, None)

    def _request(
        self,
        run: ScriptedRun,
        name: str,
        call_id: str,
        request_id: str,
        follow_up: str,
        given: dict[str, JsonValue] | None = None,
    ) -> asyncio.Future[PermissionResponse]:
        """Report a pending tool call and its permission request; the answer's future."""
        self._emit(ProviderItem(run.turn_id, ToolCall(call_id, name, ToolCallStatus.PENDING)))
        permission = PendingPermission(
            id=request_id,
            name=name,
            kind="tool",
            title=f"Allow {name}?",
            input=given or {},
            actions=(
                PermissionAction("allow", "Allow", "allow_once"),
                PermissionAction("deny", "Deny", "reject_once"),
            ),
            turn_id=run.turn_id,
        )
        answer: asyncio.Future[PermissionResponse] = asyncio.get_running_loop().create_future()
        run.asking[request_id] = (answer, follow_up)
        self._emit(ProviderPermissionRequested(run.turn_id, permission))
        return answer

    def _settled(
        self,
        run: ScriptedRun,
        name: str,
        call_id: str,
        request_id: str,
        response: PermissionResponse,
    ) -> None:
        # Echoed like real providers do; corral drops it (it already published the answer).
        self._emit(ProviderPermissionResolved(run.turn_id, request_id, response.behavior))
        if response.behavior is PermissionBehavior.ALLOW:
            done = ToolCall(call_id, name, ToolCallStatus.COMPLETED, output={"ok": True})
        else:
            why = response.message or "denied"
            done = ToolCall(call_id, name, ToolCallStatus.FAILED, error=f"permission denied: {why}")
        self._emit(ProviderItem(run.turn_id, done))

    async def _call_tool(self, run: ScriptedRun, tool: steps.Tool, index: int) -> None:
        # A started call is named by its tool, so its `/tool-end NAME` finds it.
        call_id = f"{run.tag}-call-{index}" if tool.phase == "call" else f"{run.tag}-{tool.name}"
        if tool.phase != "end":
            running = ToolCall(call_id, tool.name, ToolCallStatus.RUNNING, input=tool.input)
            self._emit(ProviderItem(run.turn_id, running))
            if tool.phase == "start":
                return
            await asyncio.sleep(0)
        completed = ToolCall(
            call_id,
            tool.name,
            ToolCallStatus.COMPLETED,
            input=tool.input,
            output=tool.output(),
        )
        self._emit(ProviderItem(run.turn_id, completed))

    def _stream_reply(
        self, run: ScriptedRun, text: str, index: int, continues: bool = False
    ) -> int:
        """Report `text` as chunks sharing one message id, so the manager's coalescer joins
        them into one assistant row. Returns the reply's word count."""
        message_id = f"{run.tag}-msg-{index}"
        if continues and run.last_message:
            message_id = run.last_message
        run.last_message = message_id
        for chunk in reply_chunks(text):
            item = AssistantMessage(chunk, message_id=message_id)
            self._emit(ProviderItem(run.turn_id, item, provider_message_id=message_id))
        return len(text.split())


def default_reply(text: str) -> str:
    """The answer to a prompt without `/reply`, `/fail` or `/spawn`."""
    return f"You said: {text}" if text else "You said nothing."


def reply_chunks(text: str) -> tuple[str, ...]:
    """Split `text` at word boundaries into at most MAX_REPLY_CHUNKS pieces whose
    concatenation is exactly `text` (whitespace travels with the following word)."""
    words = _WORD.findall(text)
    if not words:
        return (text,)
    words[-1] += text[sum(len(word) for word in words) :]
    size = -(-len(words) // MAX_REPLY_CHUNKS)
    return tuple("".join(words[i : i + size]) for i in range(0, len(words), size))
