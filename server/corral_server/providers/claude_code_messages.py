"""The stream-json messages Claude Code (`claude -p --output-format stream-json`) writes and
reads, as far as corral uses them, and the lines of its session transcripts (which have the
shape of the `user` and `assistant` messages).

Shapes only: nothing checks a line against them at run time, and every key is optional
(`total=False`), because an agent's output is input we do not control. The readers in
claude_code.py and claude_code_items.py take the declared types as the names of what may be
there and still check each value before they use it; `as_line` is the one place a parsed
line is given its type.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict, cast

from corral_server.domain.timeline import JsonValue

# --- content --------------------------------------------------------------------------------


class ContentBlock(TypedDict, total=False):
    type: str  # "text", "thinking", "tool_use", "tool_result", "image"
    text: str  # text
    thinking: str  # thinking
    id: str  # tool_use: the call's id
    name: str  # tool_use: the tool
    input: dict[str, JsonValue]  # tool_use
    tool_use_id: str  # tool_result: the call it answers
    content: str | list[ContentBlock]  # tool_result
    is_error: bool  # tool_result


class ApiMessage(TypedDict, total=False):
    id: str  # the model API's message id
    role: str
    content: str | list[ContentBlock]


# --- what Claude Code writes ----------------------------------------------------------------


class SystemLine(TypedDict, total=False):
    type: Literal["system"]
    subtype: str  # "init" names the session
    session_id: str


class AssistantLine(TypedDict, total=False):
    type: Literal["assistant"]
    message: ApiMessage  # one whole content block of the message
    is_api_error_message: bool  # a synthetic message standing for a model API error
    session_id: str


class UserLine(TypedDict, total=False):
    """Tool results in a live session; in a transcript also the user's own words."""

    type: Literal["user"]
    message: ApiMessage
    session_id: str
    uuid: str  # transcripts: the line's id
    isSidechain: bool  # transcripts: a sub-agent's own conversation
    isMeta: bool  # transcripts: not the conversation


class StreamDelta(TypedDict, total=False):
    type: str  # "text_delta", "thinking_delta", ...
    text: str
    thinking: str


class StreamEvent(TypedDict, total=False):
    type: str  # "message_start", "content_block_start", "content_block_delta", ...
    index: int  # the content block
    delta: StreamDelta


class StreamEventLine(TypedDict, total=False):
    """A model API streaming event (`--include-partial-messages`)."""

    type: Literal["stream_event"]
    event: StreamEvent
    api_message_id: str
    session_id: str


class ResultUsage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


class ModelUsage(TypedDict, total=False):
    costUSD: float


class ResultLine(TypedDict, total=False):
    """The end of a turn (or, outside one, Claude Code's reason to exit)."""

    type: Literal["result"]
    subtype: str  # "success", "error_during_execution", ...
    is_error: bool
    result: str  # the final text, or the error's
    errors: list[str]
    api_error_status: int | None  # the model API's HTTP status when it failed the turn
    usage: ResultUsage
    model_usage_since_last_result: dict[str, ModelUsage]
    session_id: str


class ControlRequestBody(TypedDict, total=False):
    subtype: str  # "can_use_tool" (the only one corral answers)
    tool_name: str
    display_name: str
    input: dict[str, JsonValue]
    tool_use_id: str
    title: str
    description: str


class ControlRequestLine(TypedDict, total=False):
    """A request of Claude Code's to us."""

    type: Literal["control_request"]
    request_id: str
    request: ControlRequestBody


class ControlCancelLine(TypedDict, total=False):
    """Claude Code no longer waits for its request `request_id` (an interrupt)."""

    type: Literal["control_cancel_request"]
    request_id: str


class ControlResponseBody(TypedDict, total=False):
    subtype: str  # "success" or "error"
    request_id: str
    response: dict[str, JsonValue]
    error: str


class ControlResponseLine(TypedDict, total=False):
    type: Literal["control_response"]
    response: ControlResponseBody


Line: TypeAlias = (
    SystemLine
    | AssistantLine
    | UserLine
    | StreamEventLine
    | ResultLine
    | ControlRequestLine
    | ControlCancelLine
    | ControlResponseLine
)


def as_line(message: dict[str, JsonValue]) -> Line:
    """A parsed stream-json line under its declared shapes (unchecked: see the docstring)."""
    return cast(Line, message)


# --- what corral writes ---------------------------------------------------------------------


class UserInput(TypedDict):
    type: Literal["user"]
    message: UserInputMessage
    parent_tool_use_id: None
    session_id: str


class UserInputMessage(TypedDict):
    role: Literal["user"]
    content: list[InputBlock]


class ImageSource(TypedDict):
    type: Literal["base64"]
    media_type: str
    data: str


class TextInput(TypedDict):
    type: Literal["text"]
    text: str


class ImageInput(TypedDict):
    type: Literal["image"]
    source: ImageSource


InputBlock: TypeAlias = TextInput | ImageInput


class Allow(TypedDict):
    """The answer to `can_use_tool` that lets the call run, with the input it runs with."""

    behavior: Literal["allow"]
    updatedInput: dict[str, JsonValue]


class Deny(TypedDict):
    behavior: Literal["deny"]
    message: str


ToolAnswer: TypeAlias = Allow | Deny
