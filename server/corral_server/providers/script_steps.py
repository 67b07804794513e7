"""The scripted provider's scripts as data: a `Script` (a prompt's text, its ordered steps and
an optional autonomous section) and one frozen type per directive. script_parser.py makes them
from a prompt; scripted_turn.py plays them. Nothing here parses or runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from corral_server.domain.timeline import JsonValue


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    # `/reply+`: more of the turn's previous reply (the same message id), so with a `/sleep`
    # between them one message is stored as several rows, as a slow stream is.
    continues: bool = False


@dataclass(frozen=True, slots=True)
class Think:
    text: str


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    # A JSON object, or None when the directive gave no input.
    input: JsonValue = None
    # "call": RUNNING then COMPLETED at once; "start" (`/tool-start`): RUNNING only; "end"
    # (`/tool-end NAME`): the COMPLETED update of the call `/tool-start NAME` began, so other
    # steps can come between a call's updates.
    phase: str = "call"
    # `/tool-output NAME BYTES`: the call's output is `output_text(BYTES)`, not {"ok": true}.
    output_bytes: int | None = None

    def output(self) -> JsonValue:
        """The COMPLETED update's output."""
        if self.output_bytes is None:
            return {"ok": True, "tool": self.name}
        return output_text(self.output_bytes)


def output_text(size: int) -> str:
    """`/tool-output`'s output: the lines "000000000\n", "000000001\n", ... cut at `size`
    bytes (ASCII, so bytes and characters agree)."""
    lines = "".join(f"{i:09d}\n" for i in range(size // 10 + 1))
    return lines[:size]


@dataclass(frozen=True, slots=True)
class Sleep:
    ms: int


@dataclass(frozen=True, slots=True)
class Fail:
    message: str


@dataclass(frozen=True, slots=True)
class RefuseInterrupt:
    pass


@dataclass(frozen=True, slots=True)
class Permission:
    name: str


@dataclass(frozen=True, slots=True)
class Spawn:
    task: str


@dataclass(frozen=True, slots=True)
class Recall:
    """The provider replies with the earlier prompts of its session (a resumed session's
    too), joined by newlines: what the session remembers."""


@dataclass(frozen=True, slots=True)
class Echo:
    """The provider reports the prompt back as a user message with its own message id, as
    real agents do (corral reconciles it with the stored prompt instead of storing it again)."""


@dataclass(frozen=True, slots=True)
class History:
    """The provider replays `count` items of earlier history (`from_history`), as a resumed
    session does: alternately a user and an assistant message."""

    count: int


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A permission request (named `follow-up`) whose ALLOW answer asks corral to run `text`
    next, as a prompt replacing the running turn (docs/design.md#turns). `text` is itself a
    valid script."""

    text: str


@dataclass(frozen=True, slots=True)
class Permissions:
    """`count` permission requests at once (named `permission-1` ...); the turn goes on when
    every one is answered. With `input_bytes`, each request's tool input is
    {"content": that many "x"}: a provider asking with large inputs."""

    count: int
    input_bytes: int = 0


# --- faults: a provider misbehaving as real ones can (with /refuse-interrupt above), so
# tests, corral's own and a client's, can drive corral's handling of it (docs/api.md).


@dataclass(frozen=True, slots=True)
class HangInterrupt:
    """From this step on, an interrupt of the turn never answers (until the session closes):
    the provider call corral makes runs into its deadline."""


@dataclass(frozen=True, slots=True)
class TerminalWithoutId:
    """The turn's terminal event (completed or failed) names no turn: corral gives it the
    running turn's id (docs/design.md#turns)."""


@dataclass(frozen=True, slots=True)
class DuplicateTerminal:
    """The turn's terminal event is reported twice, the copy right after it."""


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    """Once the turn has ended, the provider reports turn `turn_id`'s start and completion
    again, as a provider replaying a finished turn's events does (after a reconnect, say)."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class Title:
    """The provider names the conversation `text`, as Codex's thread name does
    (docs/design.md#titles)."""

    text: str


@dataclass(frozen=True, slots=True)
class Settings:
    """The provider replies with the model and mode its session runs with, as `model=M
    mode=D` (what a live change made them: docs/design.md#live-config)."""


Step: TypeAlias = (
    Reply
    | Think
    | Tool
    | Sleep
    | Fail
    | RefuseInterrupt
    | Permission
    | Permissions
    | Spawn
    | Echo
    | Recall
    | History
    | FollowUp
    | HangInterrupt
    | TerminalWithoutId
    | DuplicateTerminal
    | ReplayTurn
    | Title
    | Settings
)


@dataclass(frozen=True, slots=True)
class Autonomous:
    """`/autonomous [no-id]`: the prompt's lines after it are a script the provider runs as a
    turn it starts by itself once the prompt's turn has ended (docs/design.md#turns). With
    `no-id`, every event of that turn names no turn."""

    script: Script
    with_id: bool


@dataclass(frozen=True, slots=True)
class Script:
    """A parsed prompt. Invariant: `text`, `steps` or `autonomous` is non-empty (an
    autonomous section itself may be empty: it then answers `You said nothing.`)."""

    text: str
    steps: tuple[Step, ...]
    autonomous: Autonomous | None = None

    @property
    def needs_default_reply(self) -> bool:
        """True when no step ends the turn with its own answer (`/reply`, `/fail`, `/spawn`,
        `/settings`), so the session answers `You said: <text>` after the other steps."""
        return not any(isinstance(step, Reply | Fail | Spawn | Settings) for step in self.steps)

    def all_steps(self) -> tuple[Step, ...]:
        """The steps of this script and of its autonomous section."""
        if self.autonomous is None:
            return self.steps
        return (*self.steps, *self.autonomous.script.steps)
