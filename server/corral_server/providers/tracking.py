"""Recording what each agent process spawned, while it runs: once a second at most, and only
for agent processes that wrote something since the last look (an idle agent costs nothing),
one scan of /proc finds each one's tree (process_tree.py) and appends what is new to its
daemon's ledger (reaping.py).

Why: an agent process usually exits when its stdin closes, so after a SIGKILL of the daemon
its orphans go to init, where parentage finds them no more; the next daemon kills what the
ledger recorded that still runs (pid and start time). The agent's close kills what was
recorded too, so a process whose agent process died first is not lost either. What was spawned
within the last second before a SIGKILL may be missed.
"""

from __future__ import annotations

import asyncio
import weakref

from corral_server.providers import process_tree
from corral_server.providers.process_tree import Key
from corral_server.providers.reaping import record

SCAN_S = 1.0


class TreeRecord:
    """What one agent process spawned, as recorded so far."""

    def __init__(self, key: Key, daemon_tag: str) -> None:
        self.key = key
        self.daemon_tag = daemon_tag
        self.active = True  # it wrote something since the last look
        self.recorded: dict[Key, None] = {}


class _Recorder:
    """The watched agent processes of one event loop and the task that looks at them."""

    def __init__(self) -> None:
        self.records: set[TreeRecord] = set()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        try:
            while self.records:
                await asyncio.sleep(SCAN_S)
                active = [r for r in self.records if r.active]
                if active:
                    await self._look(active)
        finally:
            self.task = None

    async def _look(self, active: list[TreeRecord]) -> None:
        for rec in active:
            rec.active = False
        procs = await asyncio.to_thread(process_tree.table)
        for rec in active:
            if rec.key[0] not in procs or procs[rec.key[0]].start != rec.key[1]:
                continue  # gone: its close takes what was recorded
            below = process_tree.descendants([rec.key[0]], procs)
            new = [(p.pid, p.start) for p in below if (p.pid, p.start) not in rec.recorded]
            if new:
                rec.recorded.update(dict.fromkeys(new))
                await asyncio.to_thread(_append, rec.daemon_tag, new)


_recorders: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Recorder] = (
    weakref.WeakKeyDictionary()
)


def watch(key: Key, daemon_tag: str) -> TreeRecord:
    """Start recording the tree of agent process `key` (on the running loop)."""
    loop = asyncio.get_running_loop()
    recorder = _recorders.setdefault(loop, _Recorder())
    rec = TreeRecord(key, daemon_tag)
    recorder.records.add(rec)
    if recorder.task is None:
        recorder.task = loop.create_task(recorder.run(), name="corral agent trees")
    return rec


def unwatch(rec: TreeRecord) -> None:
    """Stop recording (the agent process is closing); its records are struck by `strike`."""
    for recorder in [r for r in _recorders.values() if rec in r.records]:
        recorder.records.discard(rec)
        if not recorder.records and recorder.task is not None:
            recorder.task.cancel()  # nothing left to look at: no task left pending


def strike(rec: TreeRecord) -> None:
    """Strike the agent process and what it spawned from the ledger. Blocking: a thread."""
    for key in (*rec.recorded, rec.key):
        record(rec.daemon_tag, key, add=False)


def _append(daemon_tag: str, keys: list[Key]) -> None:
    for key in keys:
        record(daemon_tag, key)
