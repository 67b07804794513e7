"""What the two sides of the peer bench (bench/peer_opencode.py, bench/peer_corral.py) have in
common: a watcher's state, and the history pager each side answers with."""

from __future__ import annotations

import asyncio
from typing import Any, Generic, Protocol, TypeVar


class View(Protocol):
    """What a watcher made of its stream: the reply's chunks (their ids, in arrival order) and
    text, when the last chunk came (monotonic), whether the turn has ended."""

    chunks: list[Any]
    text: str
    last_chunk_s: float
    idle: bool


V = TypeVar("V", bound=View)


class WatcherState(Generic[V]):
    """A watcher's progress: connected (`ready`), when it held the whole reply (`done_s`,
    monotonic), and the stream bytes it received after it was connected."""

    def __init__(self, view: V) -> None:
        self.view = view
        self.ready = asyncio.Event()
        self.done_s = 0.0
        self.bytes_in = 0

    @property
    def chunks(self) -> list[Any]:
        return self.view.chunks


class HistoryPager(Protocol):
    def turns(self) -> int: ...

    def fetch(self, turns: int | None) -> int: ...

    def close(self) -> None: ...


class Server(Protocol):
    @property
    def pid(self) -> int: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Server)


class SideBase(Generic[S]):
    """A side's server process: started, stopped and measured (its pid) through the side."""

    def __init__(self, name: str, server: S) -> None:
        self.name = name
        self.server = server

    @property
    def pid(self) -> int:
        return self.server.pid

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
