"""Fixtures for the smoke tests of the real agent programs: a fake model server per test, a
temp HOME and working directory, and `spawn`, which starts a program and, whatever the test
did, kills its process group, then every process that carries its environment tag (what escaped
the group), and fails the test if any process it started is still alive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agents import programs
from tests.agents.child import Child, sweep, tagged_processes
from tests.support.fake_models import FakeModelServer, fake_model_server

# Each program must close within this; a leftover process fails the test.
LEFTOVER_GRACE_S = 3.0


@dataclass(frozen=True, slots=True)
class Place:
    home: Path
    cwd: Path


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with fake_model_server() as server:
        yield server


@pytest.fixture
def place(tmp_path: Path) -> Place:
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    return Place(home, cwd)


Spawn = Callable[[programs.Program], AbstractAsyncContextManager[Child]]


@pytest.fixture
def spawn() -> Spawn:
    @asynccontextmanager
    async def run(program: programs.Program) -> AsyncIterator[Child]:
        name = Path(program.argv[0]).name
        assert programs.installed(name), f"{name} is not installed: run buildscripts/test"
        child = await Child.start(program.argv, program.env, program.cwd, name)
        try:
            yield child
        finally:
            await child.close()
            sweep(programs.LEFTOVER_TAG, program.tag)
            await _no_leftovers(program.tag)

    return run


async def _no_leftovers(tag: str) -> None:
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while pids := tagged_processes(programs.LEFTOVER_TAG, tag):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes left behind: {pids}")
        await asyncio.sleep(0.05)


class Timings:
    """Wall times of the turns a test ran, printed at its end (pytest -s shows them)."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.times: dict[str, float] = {}
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()

    def stop(self, label: str) -> float:
        self.times[label] = round(time.monotonic() - self._t0, 3)
        return self.times[label]


@pytest.fixture
def timings(request: pytest.FixtureRequest) -> Iterator[Timings]:
    t = Timings(request.node.name)
    yield t
    print(f"\nturn times {t.test}: {t.times}")
