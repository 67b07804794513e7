"""The `stores` fixture: every contract test runs once per timeline store backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.stores import KINDS, Stores


@pytest.fixture(params=KINDS)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    made = Stores(request.param, tmp_path)
    yield made
    await made.close()
