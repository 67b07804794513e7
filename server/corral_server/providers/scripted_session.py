"""A session of the built-in `scripted` provider: its running turn as one asyncio task.

This module owns a turn's lifecycle: start, interrupt (refused or hanging when the script says
so), steer (a `can_steer` variant), permissions answered, close, and the one terminal event
per turn; the steps themselves are played by `scripted_turn.py`. It must never raise out of
the task, never report after `close()`, and never invent a cancel it did not perform (an
interrupt it refuses answers REFUSED).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TypeAlias

from corral_server.clock import Clock
from corral_server.domain.agent import AgentError, PermissionBehavior, PermissionResponse
from corral_server.domain.content import Prompt, TextPart, prompt_text
from corral_server.errors import AgentBusy, AgentClosed, FailedPrecondition
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderEvent,
    ProviderSettings,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.providers.live import SettingsChange, SettingsRefused
from corral_server.providers.script_parser import parse_script
from corral_server.providers.script_steps import Autonomous
from corral_server.providers.scripted_turn import ScriptedRun, ScriptFailed, Spawner, TurnPlayer

logger = logging.getLogger(__name__)

SCRIPTED_FAILURE = "SCRIPTED_FAILURE"
PROVIDER_ERROR = "PROVIDER_ERROR"
INTERRUPTED = "interrupted"
# A session's prompts remembered for `/recall`: the newest this many.
MAX_REMEMBERED_PROMPTS = 64

_Terminal: TypeAlias = ProviderTurnCompleted | ProviderTurnFailed


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
        live_settings: bool = True,
        session_id: str = "",
        memory: list[str] | None = None,
    ) -> None:
        self._config = config
        self._live_settings = live_settings
        self._model, self._mode = config.model, config.mode  # a live change moves them
        self._sink = sink
        self._clock = clock
        self._spawner = spawner
        self._can_steer = can_steer
        self._session_id = session_id or f"scripted-{uuid.uuid4().hex}"
        # The session's prompts so far, shared with the provider (a resume continues it).
        self._memory = [] if memory is None else memory
        self._run: ScriptedRun | None = None
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
        text = prompt_text(prompt)
        earlier = tuple(self._memory)
        self._memory.append(text)
        del self._memory[:-MAX_REMEMBERED_PROMPTS]
        return self._begin(ScriptedRun(turn_id, text, tag=turn_id, earlier=earlier))

    def _begin(self, run: ScriptedRun) -> str:
        # Reported here rather than from the task, so an interrupt that lands before the task
        # first runs still follows a started event.
        self._emit(ProviderTurnStarted(run.turn_id))
        run.settings = f"model={self._model} mode={self._mode}"
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

    async def change_settings(self, change: SettingsChange) -> None:
        """Recorded at once and reported back (the script plays the same whatever the mode);
        a variant made with `live_settings = false` refuses, so the refusal is testable."""
        if not self._live_settings:
            raise SettingsRefused(
                f"this scripted provider cannot change the {change.describe()} of a running "
                "session (it is configured with live_settings = false)"
            )
        self._model = self._model if change.model is None else change.model
        self._mode = self._mode if change.mode is None else change.mode
        self._emit(ProviderSettings(change.model, change.mode))

    async def close(self) -> None:
        self._closed = True
        self._closing.set()
        run, self._run = self._run, None
        if run is not None and not run.task.done():
            run.task.cancel()
            await asyncio.wait([run.task])

    # --- the turn task -------------------------------------------------------------------

    async def _run_turn(self, run: ScriptedRun) -> None:
        terminal: _Terminal
        try:
            player = TurnPlayer(
                run, self._emit, self._clock, self._spawner(), self._config.agent_id
            )
            terminal = await player.play()
        except ScriptFailed as failed:
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

    def _end(self, run: ScriptedRun, terminal: _Terminal) -> None:
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
        """A turn the provider starts by itself (docs/design.md#turns): `auto-<hex>`, or no
        id."""
        tag = f"auto-{uuid.uuid4().hex}"
        script = autonomous.script
        self._begin(ScriptedRun(tag if autonomous.with_id else "", script.text, tag, script))

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

    def _emit(self, event: ProviderEvent) -> None:
        # close() cancels the task, which already silences it; this makes "nothing after
        # close" hold even for a path that forgot to check.
        if not self._closed:
            self._sink(event)
