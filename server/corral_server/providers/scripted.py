"""The built-in `scripted` provider: deterministic, offline agents for demos and tests (API.md,
"The built-in scripted provider").

This module owns running a parsed `Script` (see `script.py`) as a turn: one asyncio task per
turn that reports through the session's sink, sleeps only on the injected clock, and ends with
exactly one terminal event. It must never raise out of the task, never report after `close()`,
and never invent a cancel it did not perform (an interrupt it refuses answers REFUSED).
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeAlias, assert_never

from corral_server.clock import Clock
from corral_server.domain.agent import (
    AgentError,
    PendingPermission,
    PermissionAction,
    PermissionBehavior,
    PermissionResponse,
    Usage,
)
from corral_server.domain.content import Prompt, TextPart, prompt_text
from corral_server.domain.timeline import (
    AssistantMessage,
    JsonValue,
    Reasoning,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.errors import (
    AgentBusy,
    AgentClosed,
    CorralError,
    FailedPrecondition,
    Unimplemented,
)
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderInfo,
    ProviderItem,
    ProviderMode,
    ProviderModel,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.script import (
    Autonomous,
    DuplicateTerminal,
    Echo,
    Fail,
    FollowUp,
    HangInterrupt,
    History,
    Permission,
    Permissions,
    RefuseInterrupt,
    ReplayTurn,
    Reply,
    Script,
    Sleep,
    Spawn,
    Step,
    TerminalWithoutId,
    Think,
    Tool,
    output_text,
    parse_script,
)

logger = logging.getLogger(__name__)

SCRIPTED_FAILURE = "SCRIPTED_FAILURE"
PROVIDER_ERROR = "PROVIDER_ERROR"
INTERRUPTED = "interrupted"

# A reply is streamed in at most this many chunks: enough to exercise the coalescer, few
# enough that a short reply stays readable in a raw event log.
MAX_REPLY_CHUNKS = 4

_WORD = re.compile(r"\s*\S+")

_Terminal: TypeAlias = ProviderTurnCompleted | ProviderTurnFailed

# `/spawn <task>`: spawn a sub-agent of `agent_id` on `task` (the daemon sets it to the
# sub-agent registry's spawn); returns (run id, child agent id), raises CorralError refusals.
Spawner: TypeAlias = Callable[[str, str], Awaitable[tuple[str, str]]]


class ScriptedProvider:
    """`can_steer`: a variant whose running turn takes steered prompts (they run after the
    turn's own steps, in the same turn); the built-in `scripted` cannot steer."""

    def __init__(self, clock: Clock, *, name: str = "scripted", can_steer: bool = False) -> None:
        self._clock = clock
        self._name = name
        self._can_steer = can_steer
        # None: `/spawn` is refused as not delivered (no sub-agent registry).
        self.spawner: Spawner | None = None

    @property
    def name(self) -> str:
        return self._name

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name=self._name,
            kind="scripted",
            available=True,
            modes=(
                ProviderMode("default", "Default", "Runs the prompt's directives."),
                ProviderMode("plan", "Plan", "Same script; the mode is only recorded."),
            ),
            models=(ProviderModel("scripted-1", "Scripted 1"),),
            can_steer=self._can_steer,
        )

    def validate_prompt(self, prompt: Prompt) -> None:
        """Raise `InvalidArgument` for a malformed script, `Unimplemented` for a directive
        whose capability is not delivered yet."""
        require_delivered(parse_script(prompt_text(prompt)), can_spawn=self.spawner is not None)

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ScriptedSession:
        return ScriptedSession(
            config, sink, self._clock, lambda: self.spawner, can_steer=self._can_steer
        )


def require_delivered(script: Script, *, can_spawn: bool = False) -> None:
    """Raise `Unimplemented` naming the first directive this server cannot run yet."""
    for step in script.all_steps():
        if isinstance(step, Spawn) and not can_spawn:
            raise _undelivered(step)


def _undelivered(step: Spawn) -> Unimplemented:
    # The grammar already knows this directive; its capability comes in a later release.
    directive, capability = "/spawn", "subagents"
    return Unimplemented(
        f"{directive} needs the {capability} capability, not yet delivered",
        metadata={"directive": directive, "capability": capability},
    )


class _ScriptFailed(Exception):
    """Raised by a `/fail` step; ends the turn with SCRIPTED_FAILURE."""


@dataclass(slots=True)
class _Run:
    """The running turn. Mutable, and owned by its session."""

    # The id its events carry: "" for an id-less autonomous turn (`/autonomous no-id`).
    turn_id: str
    # The text an `/echo` reports back, and what the turn runs: parsed by its task (a
    # prompt that skipped validation fails the turn, never start_turn).
    text: str
    # Prefix of the message, call and request ids it reports: never empty.
    tag: str
    script: Script | None = None
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
    # Scripts of prompts steered into the turn (a `can_steer` provider), run after its own.
    steered: list[Script] = field(default_factory=list)
    # The permission the turn waits on, by request id: set by its answer; with the follow-up
    # prompt an ALLOW answer asks for ("" for none).
    asking: dict[str, tuple[asyncio.Future[PermissionResponse], str]] = field(default_factory=dict)


class ScriptedSession:
    """One agent's session. Invariant: `_run` is set from `start_turn` until the turn's
    terminal event has been reported (or `close()`), so a second turn can never overlap it."""

    def __init__(
        self,
        config: SessionConfig,
        sink: EventSink,
        clock: Clock,
        spawner: Callable[[], Spawner | None] = lambda: None,
        *,
        can_steer: bool = False,
    ) -> None:
        self._config = config
        self._sink = sink
        self._clock = clock
        self._spawner = spawner
        self._can_steer = can_steer
        self._session_id = f"scripted-{uuid.uuid4().hex}"
        self._run: _Run | None = None
        self._closed = False
        # Set by close(): a hanging interrupt (`/hang-interrupt`) answers then.
        self._closing = asyncio.Event()

    @property
    def session_id(self) -> str:
        return self._session_id

    async def start_turn(self, prompt: Prompt) -> str:
        if self._closed:
            raise AgentClosed(self._config.agent_id)
        if self._run is not None:
            raise AgentBusy(self._config.agent_id, self._run.turn_id)
        turn_id = f"turn-{uuid.uuid4().hex}"
        return self._begin(_Run(turn_id, prompt_text(prompt), tag=turn_id))

    def _begin(self, run: _Run) -> str:
        # Reported here rather than from the task, so an interrupt that lands before the task
        # first runs still follows a started event.
        self._emit(ProviderTurnStarted(run.turn_id))
        run.task = asyncio.create_task(self._run_turn(run), name=f"scripted {run.tag}")
        self._run = run
        return run.turn_id

    async def interrupt(self, turn_id: str) -> InterruptResult:
        run = self._run
        if run is None or (turn_id and run.turn_id != turn_id):
            return InterruptResult.NOT_RUNNING  # fenced: never stop a turn it was not meant for
        if run.hanging:
            await self._closing.wait()  # corral gives up at its deadline, and cancels this
            return InterruptResult.NOT_RUNNING
        if run.refusing:
            return InterruptResult.REFUSED
        self._run = None
        run.task.cancel()
        # Safe to report before the task has unwound: it reports only between awaits, and the
        # cancel lands at its next await, so nothing else of this turn can follow.
        self._emit(ProviderTurnCanceled(run.turn_id, reason=INTERRUPTED))
        # Waiting makes "interrupt returned" mean "the script stopped" (its timers are gone).
        await asyncio.wait([run.task])
        return InterruptResult.CONFIRMED

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        """Without `can_steer`, never (corral queues the prompt). With it, the running turn
        takes the prompt's script and runs it after its own steps; a prompt with an
        `/autonomous` section is refused (queued, it runs as a turn of its own)."""
        run = self._run
        if not self._can_steer or run is None or (turn_id and run.turn_id != turn_id):
            return False
        script = parse_script(prompt_text(prompt))
        if script.autonomous is not None:
            return False
        run.steered.append(script)
        return True

    async def close(self) -> None:
        self._closed = True
        self._closing.set()
        run, self._run = self._run, None
        if run is not None and not run.task.done():
            run.task.cancel()
            await asyncio.wait([run.task])

    # --- the turn task -------------------------------------------------------------------

    async def _run_turn(self, run: _Run) -> None:
        terminal: _Terminal
        try:
            terminal = await self._play(run)
        except _ScriptFailed as failed:
            terminal = ProviderTurnFailed(run.turn_id, AgentError(str(failed), SCRIPTED_FAILURE))
        except Exception as exc:
            # Anything else (a prompt that skipped validation, a sink that raised) fails the
            # turn rather than escaping as an unretrieved task exception.
            logger.exception("scripted turn %s failed", run.turn_id)
            message = f"scripted provider error: {exc}"
            terminal = ProviderTurnFailed(run.turn_id, AgentError(message, PROVIDER_ERROR))
        if self._run is run:
            self._run = None
        try:
            self._end(run, terminal)
        except Exception:
            logger.exception("sink raised on the terminal event of turn %s", run.tag)

    def _end(self, run: _Run, terminal: _Terminal) -> None:
        """Report the turn's terminal event (without its id, twice: as the script says),
        then start the autonomous turn it asks for, then replay the finished turns it names
        (so they land while that turn runs, or while the agent is idle)."""
        if run.terminal_without_id:
            terminal = replace(terminal, turn_id="")
        self._emit(terminal)
        if run.duplicate_terminal:
            self._emit(terminal)
        autonomous = run.script.autonomous if run.script is not None else None
        if autonomous is not None and self._run is None and not self._closed:
            self._start_autonomous(autonomous)
        for turn_id in run.replays:
            self._emit(ProviderTurnStarted(turn_id))
            self._emit(ProviderTurnCompleted(turn_id))

    def _start_autonomous(self, autonomous: Autonomous) -> None:
        """A turn the provider starts by itself (seed 000, 5.1): `auto-<hex>`, or no id."""
        tag = f"auto-{uuid.uuid4().hex}"
        script = autonomous.script
        self._begin(_Run(tag if autonomous.with_id else "", script.text, tag, script))

    async def _play(self, run: _Run) -> ProviderTurnCompleted:
        script = run.script = run.script or parse_script(run.text)
        require_delivered(script, can_spawn=self._spawner() is not None)
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

    async def _play_script(self, run: _Run, script: Script, first: int) -> int:
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

    async def _play_step(self, run: _Run, step: Step, index: int) -> int:
        """Run one step; return how many words of reply it produced."""
        match step:
            case Reply(text=text):
                return self._stream_reply(run, text, index)
            case Think(text=text):
                message_id = f"{run.tag}-think-{index}"
                self._emit(ProviderItem(run.turn_id, Reasoning(text), message_id))
            case Tool():
                await self._call_tool(run, step, index)
            case Sleep(ms=ms):
                await self._clock.sleep(ms / 1000)
            case Fail(message=message):
                raise _ScriptFailed(message)
            case RefuseInterrupt():
                run.refusing = True
            case HangInterrupt():
                run.hanging = True
            case TerminalWithoutId():
                run.terminal_without_id = True
            case DuplicateTerminal():
                run.duplicate_terminal = True
            case ReplayTurn(turn_id=turn_id):
                run.replays.append(turn_id)
            case Permission(name=name):
                await self._ask(run, index, (name,))
            case Permissions(count=count, input_bytes=size):
                names = tuple(f"permission-{n}" for n in range(1, count + 1))
                await self._ask(run, index, names, input_bytes=size)
            case FollowUp(text=text):
                await self._ask(run, index, ("follow-up",), follow_up=text)
            case Echo():
                # As a real agent does: the prompt back, under the provider's own message id.
                echo_id = f"{run.tag}-user"
                echo = UserMessage(run.text, message_id=echo_id)
                self._emit(ProviderItem(run.turn_id, echo, provider_message_id=echo_id))
            case Spawn(task=task):
                await self._spawn(run, task, index)
            case History(count=count):
                self._replay_history(run, count, index)
            case _:
                assert_never(step)
        return 0

    def _replay_history(self, run: _Run, count: int, index: int) -> None:
        """`/history N`: N items of an earlier conversation, flagged `from_history` as a
        resumed session replays them. They name the running turn on purpose: corral must
        store them outside it anyway (seed 000, 6.3)."""
        for number in range(1, count + 1):
            message_id = f"{run.tag}-history-{index}-{number}"
            item: UserMessage | AssistantMessage
            if number % 2:
                item = UserMessage(f"earlier prompt {number}", message_id=message_id)
            else:
                item = AssistantMessage(f"earlier reply {number}", message_id=message_id)
            self._emit(ProviderItem(run.turn_id, item, message_id, from_history=True))

    async def _spawn(self, run: _Run, task: str, index: int) -> None:
        """`/spawn TASK`: a `spawn_subagent` tool call that completes with the new run and
        child, or fails with the refusal (a limit, say); the turn goes on either way."""
        spawner = self._spawner()
        if spawner is None:  # validated before the turn; the daemon lost its registry since
            raise _undelivered(Spawn(task))
        call_id = f"{run.tag}-call-{index}"
        name = "spawn_subagent"
        given: JsonValue = {"task": task}
        running = ToolCall(call_id, name, ToolCallStatus.RUNNING, given)
        self._emit(ProviderItem(run.turn_id, running))
        try:
            run_id, child_id = await spawner(self._config.agent_id, task)
        except CorralError as refused:
            failed = ToolCall(call_id, name, ToolCallStatus.FAILED, given, error=refused.message)
            self._emit(ProviderItem(run.turn_id, failed))
            return
        output: JsonValue = {"run_id": run_id, "child_agent_id": child_id}
        done = ToolCall(call_id, name, ToolCallStatus.COMPLETED, given, output=output)
        self._emit(ProviderItem(run.turn_id, done))

    async def _ask(
        self,
        run: _Run,
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
        run: _Run,
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
        self, run: _Run, name: str, call_id: str, request_id: str, response: PermissionResponse
    ) -> None:
        # Echoed like real providers do; corral drops it (it already published the answer).
        self._emit(ProviderPermissionResolved(run.turn_id, request_id, response.behavior))
        if response.behavior is PermissionBehavior.ALLOW:
            done = ToolCall(call_id, name, ToolCallStatus.COMPLETED, output={"ok": True})
        else:
            why = response.message or "denied"
            done = ToolCall(call_id, name, ToolCallStatus.FAILED, error=f"permission denied: {why}")
        self._emit(ProviderItem(run.turn_id, done))

    async def respond_permission(
        self, turn_id: str, request_id: str, response: PermissionResponse
    ) -> Prompt | None:
        run = self._run
        asking = run.asking.get(request_id) if run is not None and run.turn_id == turn_id else None
        if asking is None or asking[0].done():
            raise FailedPrecondition(f"turn {turn_id!r} is not waiting for {request_id!r}")
        answer, follow_up = asking
        answer.set_result(response)
        if follow_up and response.behavior is PermissionBehavior.ALLOW:
            return (TextPart(follow_up),)
        return None

    async def _call_tool(self, run: _Run, tool: Tool, index: int) -> None:
        call_id = f"{run.tag}-call-{index}"
        running = ToolCall(call_id, tool.name, ToolCallStatus.RUNNING, input=tool.input)
        self._emit(ProviderItem(run.turn_id, running))
        await asyncio.sleep(0)
        completed = ToolCall(
            call_id,
            tool.name,
            ToolCallStatus.COMPLETED,
            input=tool.input,
            output=(
                {"ok": True, "tool": tool.name}
                if tool.output_bytes is None
                else output_text(tool.output_bytes)
            ),
        )
        self._emit(ProviderItem(run.turn_id, completed))

    def _stream_reply(self, run: _Run, text: str, index: int) -> int:
        """Report `text` as chunks sharing one message id, so the manager's coalescer joins
        them into one assistant row. Returns the reply's word count."""
        message_id = f"{run.tag}-msg-{index}"
        for chunk in reply_chunks(text):
            item = AssistantMessage(chunk, message_id=message_id)
            self._emit(ProviderItem(run.turn_id, item, provider_message_id=message_id))
        return len(text.split())

    def _emit(self, event: ProviderEvent) -> None:
        # close() cancels the task, which already silences it; this makes "nothing after
        # close" hold even for a path that forgot to check.
        if not self._closed:
            self._sink(event)


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
