"""Run ownership (docs/design.md#turns) as types: a foreground run owns only its exact id
(or an event without one); an autonomous run without an id owns every event that names none
or names it."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.manager.turns import AutonomousRun, ForegroundRun, owns


@pytest.fixture
async def settled() -> asyncio.Future[object]:
    return asyncio.get_running_loop().create_future()


@pytest.mark.parametrize(("event_turn", "owned"), [("t1", True), ("", True), ("t2", False)])
async def test_a_foreground_run_owns_its_exact_id_or_none(
    settled: asyncio.Future[object], event_turn: str, owned: bool
) -> None:
    assert owns(ForegroundRun("t1", settled), event_turn) is owned  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("run_turn", "event_turn", "owned"),
    [("a1", "a1", True), ("a1", "", True), ("a1", "t2", False), ("", "", True), ("", "t2", True)],
)
async def test_an_autonomous_run_without_an_id_owns_what_names_no_other_run(
    settled: asyncio.Future[object], run_turn: str, event_turn: str, owned: bool
) -> None:
    assert owns(AutonomousRun(run_turn, settled), event_turn) is owned  # type: ignore[arg-type]
