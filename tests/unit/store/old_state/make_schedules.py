"""Writes the old schedules state directory (old_state/schedules.db.gz) with the code of an
older corral, whose schedules are JSON text (schema version 9).

Run it with that checkout's code first on the path, from this checkout's root:

    PYTHONPATH=/path/to/old/server:/path/to/old/clients/python:. \\
        .venv/bin/python -m tests.unit.store.old_state.make_schedules tests/unit/store/old_state

The old modules are imported by name: this checkout moved the schedule types.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.unit.store.old_state.make import make
from tests.unit.store.old_state.schedules_sample import schedules


def _old(module: str) -> Any:
    return importlib.import_module(module)


def old_types() -> SimpleNamespace:
    model = _old("corral_server.schedules.model")
    ran = _old("corral_server.domain.schedules")
    return SimpleNamespace(
        Schedule=model.Schedule,
        Timing=model.Timing,
        ScheduleId=model.ScheduleId,
        ScheduleRun=ran.ScheduleRun,
        ScheduleOutcome=ran.ScheduleOutcome,
        CreateSpec=_old("corral_server.manager.specs").CreateSpec,
        WorktreeRequest=_old("corral_server.domain.workspace").WorktreeRequest,
        IfRunning=_old("corral_server.manager.turns").IfRunning,
    )


async def _write(state: Path) -> None:
    db = await _old("corral_server.store.database").Database.open(state, synchronous="FULL")
    try:
        store = _old("corral_server.schedules.store").SqliteSchedules(db)
        for schedule in schedules(old_types()):
            await store.put(schedule)
    finally:
        await db.close()


def main(out: Path) -> None:
    make(_write, out / "schedules.db.gz")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
