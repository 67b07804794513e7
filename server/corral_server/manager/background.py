"""Work an actor starts off its queue (a follow-up prompt's replace, the interrupt of a turn
failed for asking too much): kept so the actor's stop cancels what is still on its way."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        """The actor stops: nothing still on its way goes on."""
        for task in list(self._tasks):
            task.cancel()
