"""Claude Code's control protocol over its stream-json line connection (`claude -p`).

This module owns the control messages: our `control_request`s with their ids, the
`control_response`s that settle them, and our answers to Claude Code's own control requests.
It knows nothing of sessions or turns: every other line goes, in order, to the reader it was
given (a `control_request` of Claude Code's among them).

Stream-json is JSON lines only, so the connection is strict (connection.py): a line that is
not a JSON object means the two sides no longer agree on where the turn is, and continuing
could end the wrong turn. Claude Code runs each Bash command in a session of its own
(setsid), so a command's background child outlives a kill of the process group; the process
tag (child.py) still finds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import cast

from corral_server.domain.timeline import JsonObject, JsonValue
from corral_server.providers.claude_code_messages import ControlResponseLine
from corral_server.providers.connection import (
    ConnectionLost,
    Framing,
    LineConnection,
    MessageReader,
    RequestFailed,
)

# After stdin closes Claude Code exits on its own (measured: ~0.05 s when idle).
FRAMING = Framing(who="claude", label="claude", strict=True, eof_grace_s=0.5)


class ClaudeControl:
    """Control requests both ways over `line`, which it starts reading."""

    def __init__(
        self,
        line: LineConnection,
        on_message: MessageReader,
        on_lost: Callable[[ConnectionLost], None],
    ) -> None:
        self._line = line
        self._on_message = on_message
        self._ids = itertools.count(1)
        line.start(self._read, on_lost)

    async def send(self, message: Mapping[str, object]) -> None:
        await self._line.send(message)

    async def control(self, request: Mapping[str, object]) -> JsonValue:
        """Send a control request and wait for its response (`RequestFailed` when Claude Code
        answers it with an error; no deadline here: the caller's actor has one)."""
        request_id = f"corral-{next(self._ids)}"
        message = {"type": "control_request", "request_id": request_id, "request": request}
        return await self._line.call(request_id, message, str(request.get("subtype")))

    async def respond(self, request_id: str, response: Mapping[str, object]) -> None:
        """Answer a control request of Claude Code's with success."""
        answer = {"subtype": "success", "request_id": request_id, "response": response}
        await self._line.send({"type": "control_response", "response": answer})

    async def refuse(self, request_id: str, error: str) -> None:
        """Answer a control request of Claude Code's with an error."""
        answer = {"subtype": "error", "request_id": request_id, "error": error}
        await self._line.send({"type": "control_response", "response": answer})

    def _read(self, message: JsonObject) -> None:
        if message.get("type") != "control_response":
            self._on_message(message)
            return
        response = cast(ControlResponseLine, message).get("response")
        if not isinstance(response, dict):
            return
        request_id = str(response.get("request_id"))
        if response.get("subtype") == "error":
            error = RequestFailed(str(response.get("error", "error")))
            self._line.settle(request_id, error=error)
        else:
            self._line.settle(request_id, response.get("response"))


def settings_requests(
    model: str | None, mode: str | None, default_mode: str
) -> list[dict[str, object]]:
    """The control requests that change a running session's model (none named: Claude
    Code's default) and permission mode."""
    requests: list[dict[str, object]] = []
    if model is not None:
        requests.append({"subtype": "set_model", **({"model": model} if model else {})})
    if mode is not None:
        requests.append({"subtype": "set_permission_mode", "mode": mode or default_mode})
    return requests
