from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.manager.harness import World


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = World(cwd=str(tmp_path))
    yield w
    await w.manager.shutdown()  # stop every actor task the test left running
