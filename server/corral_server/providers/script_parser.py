"""The grammar of the built-in `scripted` provider (docs/api.md, "The scripted provider").

This module owns parsing only: a prompt's text becomes a `Script` (script_steps.py: the plain
text plus an ordered tuple of steps) or an `InvalidArgument` whose field violations name every
bad line. It never runs a step, never sleeps and knows nothing of sessions, events or which
capabilities the server has delivered yet (that is `scripted_turn.py`'s concern).

Grammar: a line that starts with `/` is a directive; every other line is text. The text is the
non-directive lines joined with newlines, without leading or trailing blank lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace

from corral_server.domain.timeline import JsonValue
from corral_server.errors import FieldViolation, InvalidArgument
from corral_server.providers.script_steps import (
    Autonomous,
    DuplicateTerminal,
    Echo,
    Fail,
    FollowUp,
    HangInterrupt,
    History,
    Permission,
    Permissions,
    Recall,
    RefuseInterrupt,
    ReplayTurn,
    Reply,
    Script,
    Settings,
    Sleep,
    Spawn,
    Step,
    TerminalWithoutId,
    Think,
    Title,
    Tool,
)

# Listed in error messages, so a user who mistyped one sees what exists.
KNOWN_DIRECTIVES = (
    "/autonomous",
    "/duplicate-terminal",
    "/echo",
    "/fail",
    "/follow-up",
    "/hang-interrupt",
    "/history",
    "/permission",
    "/permissions",
    "/recall",
    "/refuse-interrupt",
    "/replay-turn",
    "/reply",
    "/reply+",
    "/settings",
    "/sleep",
    "/spawn",
    "/terminal-without-id",
    "/think",
    "/title",
    "/tool",
    "/tool-end",
    "/tool-output",
    "/tool-start",
)

# One day: long enough for any "keep the turn busy" test, short enough that no clock overflows
# and `int()` never meets a thousand-digit number.
MAX_SLEEP_MS = 86_400_000
# `/history N` replays at most this many items: enough to fill several timeline pages.
MAX_HISTORY_ITEMS = 10_000
# `/permissions N` asks at most this many at once: past corral's limit of pending requests
# (manager/permissions.py's 64), so a test can drive a provider that breaks it.
MAX_PERMISSIONS = 100
# `/permissions N BYTES` gives each request an input of at most this size: past corral's cut
# of a request's input (manager/permissions.py's 1 MiB).
MAX_INPUT_BYTES = 16 << 20

_FIELD = "content"
_DIRECTIVE = re.compile(r"/(\S*)(?:\s+(.*))?", re.DOTALL)
_TOOL = re.compile(r"(\S+)(?:\s+(.*))?", re.DOTALL)
_MS = re.compile(r"[0-9]{1,9}")
_COUNT = re.compile(r"[0-9]{1,5}")
_TURN_ID = re.compile(r"\S{1,128}")


class _BadLine(ValueError):
    """One directive line that cannot be parsed; the message says why."""


def parse_script(text: str) -> Script:
    """Parse a prompt's text. Raises `InvalidArgument` with one violation per bad line (field
    `content`, description starting `line N:`), or one for a prompt with nothing in it."""
    lines = text.splitlines()
    violations: list[FieldViolation] = []
    split = next((n for n, line in enumerate(lines) if _is_autonomous(line)), len(lines))
    script = _parse_lines(lines[:split], 1, violations)
    if split < len(lines):
        with_id = _parse_autonomous(lines[split], split + 1, violations)
        section = _parse_lines(lines[split + 1 :], split + 2, violations, nested=True)
        script = replace(script, autonomous=Autonomous(section, with_id))
    if violations:
        raise InvalidArgument(_summary(violations), *violations)
    if not script.text and not script.steps and script.autonomous is None:
        raise InvalidArgument.field(
            _FIELD, "the prompt is empty: write some text or a directive such as `/reply hello`"
        )
    return script


def _is_autonomous(line: str) -> bool:
    return line == "/autonomous" or line.startswith(("/autonomous ", "/autonomous\t"))


def _parse_autonomous(line: str, number: int, violations: list[FieldViolation]) -> bool:
    """`/autonomous` (True: the turn has an id) or `/autonomous no-id` (False)."""
    argument = line[len("/autonomous") :].strip()
    if argument not in ("", "no-id"):
        why = f"/autonomous takes nothing or `no-id`, got {argument!r}"
        violations.append(FieldViolation(_FIELD, f"line {number}: {why}"))
    return argument != "no-id"


def _parse_lines(
    lines: list[str], first: int, violations: list[FieldViolation], *, nested: bool = False
) -> Script:
    """Steps and text of `lines` (numbered from `first`); bad lines go to `violations`."""
    steps: list[Step] = []
    text_lines: list[str] = []
    for number, line in enumerate(lines, start=first):
        if not line.startswith("/"):
            text_lines.append(line)
            continue
        try:
            if nested and _is_autonomous(line):
                raise _BadLine("a prompt holds at most one /autonomous section")
            steps.append(_parse_directive(line))
        except _BadLine as bad:
            violations.append(FieldViolation(_FIELD, f"line {number}: {bad}"))
    return Script(text=_strip_blank_lines(text_lines), steps=tuple(steps))


# Directives that take no argument: the step each stands for.
_BARE: dict[str, Callable[[], Step]] = {
    "/settings": Settings,
    "/refuse-interrupt": RefuseInterrupt,
    "/echo": Echo,
    "/recall": Recall,
    "/hang-interrupt": HangInterrupt,
    "/terminal-without-id": TerminalWithoutId,
    "/duplicate-terminal": DuplicateTerminal,
}

# Directives whose argument is one required text: the step, and what the text is (for the
# error when it is missing).
_TEXT: dict[str, tuple[Callable[[str], Step], str]] = {
    "/reply": (Reply, "the reply text"),
    "/reply+": (lambda text: Reply(text, continues=True), "the reply text"),
    "/tool-end": (lambda name: Tool(name, phase="end"), "the tool name"),
    "/think": (Think, "the reasoning text"),
    "/title": (Title, "the title"),
    "/fail": (Fail, "the error message"),
    "/permission": (Permission, "a permission name"),
    "/spawn": (Spawn, "the sub-agent's task"),
}


def _parse_directive(line: str) -> Step:
    match = _DIRECTIVE.fullmatch(line)
    # The pattern matches every line that starts with "/", so this only guards the type.
    assert match is not None
    name, argument = "/" + match.group(1), (match.group(2) or "").strip()
    if (bare := _BARE.get(name)) is not None:
        _no_argument(name, argument)
        return bare()
    if (text := _TEXT.get(name)) is not None:
        step, what = text
        return step(_required(name, argument, what))
    return _parse_with_argument(name, argument)


def _parse_with_argument(name: str, argument: str) -> Step:
    """The directives whose argument has a grammar of its own."""
    match name:
        case "/tool-start":
            return replace(_parse_tool(argument), phase="start")
        case "/tool":
            return _parse_tool(argument)
        case "/tool-output":
            return _parse_tool_output(argument)
        case "/sleep":
            return Sleep(_parse_ms(argument))
        case "/history":
            return History(_parse_count(argument, name, MAX_HISTORY_ITEMS, "items"))
        case "/follow-up":
            return FollowUp(_parse_follow_up(argument))
        case "/permissions":
            count, _, size = argument.partition(" ")
            input_bytes = _parse_size(size.strip(), name) if size.strip() else 0
            return Permissions(_parse_count(count, name, MAX_PERMISSIONS, "requests"), input_bytes)
        case "/replay-turn":
            if _TURN_ID.fullmatch(argument) is None:
                raise _BadLine(f"/replay-turn needs one turn id (1-128 characters): {argument!r}")
            return ReplayTurn(argument)
        case _:
            raise _BadLine(
                f"unknown directive {name!r}; known directives: {', '.join(KNOWN_DIRECTIVES)}"
            )


def _no_argument(directive: str, argument: str) -> None:
    if argument:
        raise _BadLine(f"{directive} takes no argument, got {argument!r}")


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


def _parse_tool_output(argument: str) -> Tool:
    tool_name, _, size = argument.partition(" ")
    if not tool_name:
        raise _BadLine("/tool-output needs a tool name and an output size in bytes")
    return Tool(tool_name, output_bytes=_parse_size(size.strip(), "/tool-output"))


def _parse_size(argument: str, directive: str) -> int:
    if not argument.isdigit() or int(argument) > MAX_INPUT_BYTES:
        raise _BadLine(
            f"{directive}: a size is a number of bytes from 0 to {MAX_INPUT_BYTES}, "
            f"got {argument!r}"
        )
    return int(argument)


def _parse_count(argument: str, directive: str, most: int, what: str) -> int:
    if _COUNT.fullmatch(argument) is None or not 1 <= int(argument) <= most:
        raise _BadLine(f"{directive} takes a number of {what} from 1 to {most}, got {argument!r}")
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
