"""The full-text index's insert in the writer thread beside a busy event loop: one commit's
entries by `executemany` (the GIL taken back after every row's step) against one packed
statement (store/search_packed.py, the whole FTS5 insert without the GIL), per row: the writer
thread's wall and CPU microseconds, with the main thread idle and with it spinning Python code
(the loop in a burst). Alternated per trial, in one process.

Run: .venv/bin/python -m bench.search_packing [trials]
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import sys
import threading
import time
from typing import Any

from corral_server.store import search_packed
from corral_server.store.search_snippets import _TABLE

ROWS = 20_000  # a commit's entries
COMMITS = 4
WORDS = 12

Entry = tuple[Any, ...]


def _commits() -> list[list[Entry]]:
    rng = random.Random(1)
    vocabulary = [f"w{i}x" for i in range(20_000)]
    return [
        [
            ((c + 1 << 32) + i, " ".join(rng.choices(vocabulary, k=WORDS)), "assistant_message", i)
            for i in range(ROWS)
        ]
        for c in range(COMMITS)
    ]


def _write(commits: list[list[Entry]], packed: bool, out: list[tuple[float, float]]) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute(_TABLE)
    wall, cpu = time.perf_counter(), time.thread_time()
    for entries in commits:
        conn.execute("BEGIN")
        if packed:
            search_packed.insert(conn, list(entries))
        else:
            conn.executemany(search_packed.INSERT, entries)
        conn.execute("COMMIT")
    out.append((time.perf_counter() - wall, time.thread_time() - cpu))
    conn.close()


def trial(commits: list[list[Entry]], packed: bool, busy: bool) -> tuple[float, float]:
    """The writer thread's (wall, CPU) microseconds per row."""
    out: list[tuple[float, float]] = []
    writer = threading.Thread(target=_write, args=(commits, packed, out))
    writer.start()
    while busy and writer.is_alive():
        sum(range(1000))  # Python bytecode holding the GIL, as the loop does in a burst
    writer.join()
    wall, cpu = out[0]
    rows = ROWS * COMMITS
    return wall / rows * 1e6, cpu / rows * 1e6


def main(trials: int) -> None:
    commits = _commits()
    figures: dict[tuple[bool, bool], list[tuple[float, float]]] = {}
    for _ in range(trials):
        for busy in (False, True):
            for packed in (False, True):
                figures.setdefault((packed, busy), []).append(trial(commits, packed, busy))
    for (packed, busy), runs in sorted(figures.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(
            f"{'packed' if packed else 'executemany':<11} loop {'busy' if busy else 'idle'}:"
            f" writer {wall:6.2f} us/row wall, {cpu:5.2f} us/row CPU (median of {len(runs)})"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
