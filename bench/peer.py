"""P9 (BENCHMARKS.md#goals): corral against a real peer, opencode, on the same work.

Both servers drive opencode's own agent loop against one fake model server (the tests' own,
tests/support/fake_models, in this process) that streams each reply as K text deltas, 0.1 s
apart (its `[[slow]]` pacing: longer than corral's 60 ms coalescing window, so every delta is
delivered as its own chunk by both):

  opencode  `opencode serve`: the loop runs inside the server; watchers are GET /event streams
  corral    `corral serve` with opencode as an ACP agent (`opencode acp`, a child process):
            watchers are Subscribe streams scoped to the agent

Per repetition, each server is started afresh (the two alternate, REPS times each) and, on a
new session, after a warm-up turn:

  watchers 1 / 10 / 100   one turn each: the time from the model's first byte to the last
                          watcher holding the complete reply; server CPU per delta per watcher
                          (corral: the daemon alone, its agent process given apart as the ACP
                          hop); event-stream bytes per watcher
  after churn             one watcher again, after 111 watchers connected and left
  drop and resume         a watcher leaves after a third of the reply and comes back a third
                          later (opencode: /event with Last-Event-ID; corral: Subscribe with
                          its resume revision): chunks missing and duplicated
  history                 a session of 150 turns (built once, kept across restarts):
                          the whole history, the last 100 turns, the last 10 turns

Run: buildscripts/bench --peer [reps [deltas [history turns]]]   (3, 30, 150; it installs the
     pinned opencode into agents/ when missing; CORRAL_OPENCODE names another opencode binary)
     .venv/bin/python -m bench.peer [reps [deltas [history turns]]]
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import peer_procs
from bench.peer_corral import CorralSide
from bench.peer_opencode import OpencodeSide, binary
from bench.peer_report import Figures, report
from bench.peer_turns import Side, cpu_between, cpu_now, drop_and_resume, history, streamed_turn
from tests.support.fake_models import FakeModelServer, fake_model_server

REPS = 3
DELTAS = 30
WATCHERS = (1, 10, 100)
HISTORY_TURNS = 150
IDLE_S = 3.0
RAW = Path(".bench/peer.pickle")  # the last run's figures


@dataclass(frozen=True, slots=True)
class Plan:
    deltas: int = DELTAS  # per streamed reply
    history_turns: int = HISTORY_TURNS  # 0: no history pages


async def build_history(side: Side, made: dict[str, str], turns: int) -> str:
    """The history session: made on the side's first run, kept across its restarts."""
    if side.name not in made:
        session = await side.new_session()
        words = " ".join(f"word{i}" for i in range(40))
        for i in range(turns):
            await side.turn(session, f"[[reply: turn {i}: {words}]]")
        made[side.name] = session
    return made[side.name]


async def idle_cpu_ms_per_s(side: Side) -> float:
    """The server's CPU while nothing happens (after a turn, no watcher), per second."""
    before = cpu_now([side.pid])
    await asyncio.sleep(IDLE_S)
    return cpu_between(before, cpu_now([side.pid])) / 1e6 / IDLE_S


async def repetition(
    side: Side, fake: FakeModelServer, plan: Plan, figures: Figures, made: dict[str, str]
) -> None:
    deltas = plan.deltas
    await asyncio.to_thread(side.start)
    try:
        figures.load(side.name, peer_procs.load())
        session = await side.new_session()
        await side.turn(session, "[[reply: warm up]]")
        figures.idle(side.name, await idle_cpu_ms_per_s(side))
        for count in WATCHERS:
            turn = await streamed_turn(side, fake, session, count, deltas)
            figures.add(side.name, f"w{count}", turn)
        figures.add(side.name, "churn", await streamed_turn(side, fake, session, 1, deltas))
        figures.drops(side.name, await drop_and_resume(side, fake, session, deltas))
        if plan.history_turns:
            session = await build_history(side, made, plan.history_turns)
            figures.history(side.name, await history(side, session))
        figures.load(side.name, peer_procs.load())
    finally:
        closing = getattr(side, "close", None)
        if closing is not None:
            await closing()
        await asyncio.to_thread(side.stop)


async def run(reps: int, plan: Plan) -> Figures:
    if not binary().exists():
        raise SystemExit(f"no opencode at {binary()}: run buildscripts/bench --peer")
    figures = Figures(plan.deltas)
    with tempfile.TemporaryDirectory(prefix="corral-peer-") as tmp, fake_model_server() as fake:
        sides: list[Side] = [
            OpencodeSide(Path(tmp) / "opencode", fake.url),
            CorralSide(Path(tmp) / "corral", fake.url),
        ]
        made: dict[str, str] = {}
        for rep in range(reps):
            for side in sides if rep % 2 == 0 else sides[::-1]:
                print(f"P9 peer: repetition {rep + 1}/{reps}, {side.name} ...", flush=True)
                try:
                    await repetition(side, fake, plan, figures, made)
                except Exception as error:  # one failed repetition: say so, go on
                    print(f"P9 peer: {side.name} repetition {rep + 1} failed: {error!r}")
                    figures.failed(side.name, repr(error))
                await asyncio.to_thread(save, figures)
    return figures


def save(figures: Figures) -> None:
    """The figures so far (`python -m bench.peer_report` prints them again)."""
    RAW.parent.mkdir(exist_ok=True)
    with open(RAW, "wb") as raw:
        pickle.dump(figures, raw)


def main() -> None:
    numbers = [int(arg) for arg in sys.argv[1:4]]
    reps = numbers[0] if numbers else REPS
    print(report(asyncio.run(run(reps, Plan(*numbers[1:])))))


if __name__ == "__main__":
    main()
