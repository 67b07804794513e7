"""Timeline stores for the shared contract suite: the same tests run against every backend.

`Stores(kind, directory)` makes stores of one kind ("memory" or "sqlite"); `close()` closes
every database it opened. A later backend joins the suite by adding a kind here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store import Database, SqliteTimelineStore
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import TimelineStore

KINDS = ("memory", "sqlite")


def counting_epochs() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"epoch-{next(counter)}"


class Stores:
    def __init__(self, kind: str, directory: Path) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown store kind {kind!r}")
        self.kind = kind
        self._directory = directory
        self._names = itertools.count(1)
        self._databases: list[Database] = []

    async def make(self, **options: Any) -> TimelineStore:
        """A new, empty store; `options` are the stores' shared keyword arguments."""
        if self.kind == "memory":
            return InMemoryTimelineStore(**options)
        # NORMAL: the semantics of FULL without an fsync per commit (tests/unit/store: FULL).
        directory = self._directory / f"store-{next(self._names)}"
        database = await Database.open(directory, synchronous="NORMAL")
        self._databases.append(database)
        return await SqliteTimelineStore.open(database, ITEM_CODEC, **options)

    async def close(self) -> None:
        databases, self._databases = self._databases, []
        for database in databases:
            await database.close()
