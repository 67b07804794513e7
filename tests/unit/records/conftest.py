"""The `records` fixture: every contract test runs once per records backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.stores import KINDS, Records


@pytest.fixture(params=KINDS)
async def records(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Records]:
    made = Records(request.param, tmp_path)
    yield made
    await made.close()
