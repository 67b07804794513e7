"""A bench-only provider that bursts: a prompt `rows N` makes one turn emit N assistant rows
(about 100 characters each, distinct message ids so the coalescer keeps them apart) as fast as
the manager takes them, in slices of `SLICE` per event-loop iteration, then completes."""

from __future__ import annotations

import asyncio
import uuid

from corral_server.domain.agent import PermissionResponse, Usage
from corral_server.domain.content import Prompt, prompt_text
from corral_server.domain.timeline import AssistantMessage
from corral_server.errors import InvalidArgument
from corral_server.providers.base import (
    EventSink,
    InterruptResult,
    ProviderInfo,
    ProviderItem,
    ProviderTurnCompleted,
    ProviderTurnStarted,
    SessionConfig,
)

SLICE = 500
TEXT = (
    "streamed assistant output of a bursting agent, "
    "about one hundred characters long, for the bench."
)


def _rows(prompt: Prompt) -> int:
    words = prompt_text(prompt).split()
    if len(words) != 2 or words[0] != "rows" or not words[1].isdigit():
        raise InvalidArgument.field("content", "burst prompts are `rows N`")
    return int(words[1])


class BurstSession:
    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._task: asyncio.Task[None] | None = None
        self.session_id = "burst-" + uuid.uuid4().hex

    async def start_turn(self, prompt: Prompt) -> str:
        turn_id = "turn-" + uuid.uuid4().hex
        self._sink(ProviderTurnStarted(turn_id))
        self._task = asyncio.create_task(self._burst(turn_id, _rows(prompt)))
        return turn_id

    async def _burst(self, turn_id: str, rows: int) -> None:
        for start in range(0, rows, SLICE):
            for i in range(start, min(rows, start + SLICE)):
                item = AssistantMessage(TEXT, message_id=f"m{i}")
                self._sink(ProviderItem(turn_id, item, provider_message_id=f"m{i}"))
            await asyncio.sleep(0)
        self._sink(ProviderTurnCompleted(turn_id, Usage(output_tokens=rows)))

    async def interrupt(self, turn_id: str) -> InterruptResult:
        return InterruptResult.REFUSED  # a burst runs to its end

    async def respond_permission(
        self, turn_id: str, request_id: str, response: PermissionResponse
    ) -> Prompt | None:
        raise InvalidArgument(f"a burst asks no permission: {request_id}")

    async def steer(self, turn_id: str, prompt: Prompt) -> bool:
        return False  # not taken: corral queues the prompt

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


class BurstProvider:
    name = "burst"

    def info(self) -> ProviderInfo:
        return ProviderInfo(name=self.name, kind="bench", available=True)

    def validate_prompt(self, prompt: Prompt) -> None:
        _rows(prompt)

    async def create_session(self, config: SessionConfig, sink: EventSink) -> BurstSession:
        return BurstSession(sink)
