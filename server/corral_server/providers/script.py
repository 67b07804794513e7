"""The grammar of the built-in `scripted` provider (API.md, "The built-in scripted provider").

This module owns parsing only: a prompt's text becomes a `Script` (the plain text plus an
ordered tuple of steps) or an `InvalidArgument` whose field violations name every bad line. It
never runs a step, never sleeps and knows nothing of sessions, events or which capabilities the
server has delivered yet (that is `scripted.py`'s concern).

Grammar: a line that starts with `/` is a directive; every other line is text. The text is the
non-directive lines joined with newlines, without leading or trailing blank lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TypeAlias

from corral_server.domain.timeline import JsonValue
from corral_server.errors import FieldViolation, InvalidArgument

# Listed in error messages, so a user who mistyped one sees what exists.
KNOWN_DIRECTIVES = (
    "/echo",
    "/fail",
    "/follow-up",
    "/history",
    "/permission",
    "/refuse-interrupt",
    "/reply",
    "/sleep",
    "/spawn",
    "/think",
    "/tool",
)

# One day: long enough for any "keep the turn busy" test, short enough that no clock overflows
# and `int()` never meets a thousand-digit number.
MAX_SLEEP_MS = 86_400_000
# `/history N` replays at most this many items: enough to fill several timeline pages.
MAX_HISTORY_ITEMS = 10_000

_FIELD = "content"
_DIRECTIVE = re.compile(r"/(\S*)(?:\s+(.*))?", re.DOTALL)
_TOOL = re.compile(r"(\S+)(?:\s+(.*))?", re.DOTALL)
_MS = re.compile(r"[0-9]{1,9}")
_COUNT = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True, slots=True)
class Reply:
    text: str


@dataclass(frozen=True, slots=True)
class Think:
    text: str


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    # A JSON object, or None when the directive gave no input.
    input: JsonValue = None


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
    next, as a prompt replacing the running turn (seed 000, section 10). `text` is itself a
    valid script."""

    text: str


Step: TypeAlias = (
    Reply
    | Think
    | Tool
    | Sleep
    | Fail
    | RefuseInterrupt
    | Permission
    | Spawn
    | Echo
    | History
    | FollowUp
)


@dataclass(frozen=True, slots=True)
class Script:
    """A parsed prompt. Invariant: `text` or `steps` is non-empty."""

    text: str
    steps: tuple[Step, ...]

    @property
    def needs_default_reply(self) -> bool:
        """True when no step ends the turn with its own answer (`/reply`, `/fail`, `/spawn`),
        so the session answers `You said: <text>` after the other steps."""
        return not any(isinstance(step, Reply | Fail | Spawn) for step in self.steps)


class _BadLine(ValueError):
    """One directive line that cannot be parsed; the message says why."""


def parse_script(text: str) -> Script:
    """Parse a prompt's text. Raises `InvalidArgument` with one violation per bad line (field
    `content`, description starting `line N:`), or one for a prompt with nothing in it."""
    steps: list[Step] = []
    text_lines: list[str] = []
    violations: list[FieldViolation] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("/"):
            text_lines.append(line)
            continue
        try:
            steps.append(_parse_directive(line))
        except _BadLine as bad:
            violations.append(FieldViolation(_FIELD, f"line {number}: {bad}"))
    if violations:
        raise InvalidArgument(_summary(violations), *violations)
    body = _strip_blank_lines(text_lines)
    if not body and not steps:
        raise InvalidArgument.field(
            _FIELD, "the prompt is empty: write some text or a directive such as `/reply hello`"
        )
    return Script(text=body, steps=tuple(steps))


def _parse_directive(line: str) -> Step:
    match = _DIRECTIVE.fullmatch(line)
    # The pattern matches every line that starts with "/", so this only guards the type.
    assert match is not None
    name, argument = "/" + match.group(1), (match.group(2) or "").strip()
    match name:
        case "/reply":
            return Reply(_required(name, argument, "the reply text"))
        case "/think":
            return Think(_required(name, argument, "the reasoning text"))
        case "/tool":
            return _parse_tool(argument)
        case "/sleep":
            return Sleep(_parse_ms(argument))
        case "/fail":
            return Fail(_required(name, argument, "the error message"))
        case "/refuse-interrupt":
            if argument:
                raise _BadLine(f"/refuse-interrupt takes no argument, got {argument!r}")
            return RefuseInterrupt()
        case "/permission":
            return Permission(_required(name, argument, "a permission name"))
        case "/spawn":
            return Spawn(_required(name, argument, "the sub-agent's task"))
        case "/history":
            return History(_parse_count(argument))
        case "/follow-up":
            return FollowUp(_parse_follow_up(argument))
        case "/echo":
            if argument:
                raise _BadLine(f"/echo takes no argument, got {argument!r}")
            return Echo()
        case _:
            raise _BadLine(
                f"unknown directive {name!r}; known directives: {', '.join(KNOWN_DIRECTIVES)}"
            )


def _required(directive: str, argument: str, what: str) -> str:
    if not argument:
        raise _BadLine(f"{directive} needs {what}")
    return argument


def _parse_tool(argument: str) -> Tool:
    match = _TOOL.fullmatch(argument)
    if match is None:
        raise _BadLine("/tool needs a tool name, then optionally a JSON object as its input")
    name, raw = match.group(1), match.group(2)
    if raw is None:
        return Tool(name)
    try:
        value: object = json.loads(raw, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise _BadLine(
            f"/tool {name}: input is not valid JSON: {err.msg} (column {err.colno})"
        ) from err
    except (ValueError, RecursionError) as err:
        raise _BadLine(f"/tool {name}: input is not valid JSON: {err}") from err
    # Tool inputs travel as google.protobuf.Struct, which only holds an object.
    if not isinstance(value, dict):
        raise _BadLine(f"/tool {name}: input must be a JSON object, got {type(value).__name__}")
    if _depth(value) > MAX_TOOL_INPUT_DEPTH:
        raise _BadLine(f"/tool {name}: input nests deeper than {MAX_TOOL_INPUT_DEPTH} levels")
    return Tool(name, value)


# google.protobuf's JSON conversion stops at 100 levels, and each object costs two
# (Struct -> Value); 32 leaves a wide margin and is deeper than any real tool input.
MAX_TOOL_INPUT_DEPTH = 32


def _depth(value: object) -> int:
    """Nesting depth of a JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(node, dict):
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, level + 1) for child in node)
    return deepest


def _reject_constant(constant: str) -> JsonValue:
    # Python's json accepts NaN and Infinity; JSON (and Struct) do not.
    raise ValueError(f"{constant} is not a JSON value")


def _parse_ms(argument: str) -> int:
    if _MS.fullmatch(argument) is None or int(argument) > MAX_SLEEP_MS:
        raise _BadLine(
            f"/sleep takes a whole number of milliseconds from 0 to {MAX_SLEEP_MS}, "
            f"got {argument!r}"
        )
    return int(argument)


def _parse_follow_up(argument: str) -> str:
    text = _required("/follow-up", argument, "the follow-up prompt")
    try:
        parse_script(text)
    except InvalidArgument as bad:
        raise _BadLine(f"/follow-up: its prompt is invalid: {bad.message}") from bad
    return text


def _parse_count(argument: str) -> int:
    if _COUNT.fullmatch(argument) is None or not 1 <= int(argument) <= MAX_HISTORY_ITEMS:
        raise _BadLine(
            f"/history takes a number of items from 1 to {MAX_HISTORY_ITEMS}, got {argument!r}"
        )
    return int(argument)


def _strip_blank_lines(lines: list[str]) -> str:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[start:end])


def _summary(violations: list[FieldViolation]) -> str:
    first = violations[0].description
    if len(violations) == 1:
        return f"{_FIELD}: {first}"
    return f"{_FIELD}: {len(violations)} invalid directive lines; first: {first}"
