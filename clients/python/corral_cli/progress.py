"""A line on the terminal while the CLI waits: what it waits for, how long that may take, and
how long it has waited so far.

It appears only once a wait has lasted a second (most calls answer sooner and show nothing),
only when stderr is a terminal, and never with `--json`: a pipe or a log file gets no progress.
The line is redrawn in place each second and erased when the wait ends, so what the command
prints next starts on a clean line.

Must not: write to stdout, or outlive the wait it reports (the ticker stops and joins first).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from corral_cli.render import Console

# A wait shorter than this shows nothing (a line that flashes is noise).
SHOW_AFTER_S = 1.0
_TICK_S = 1.0
_ERASE = "\r\x1b[K"


@contextmanager
def waiting(console: Console, what: str, limit: str) -> Iterator[None]:
    """Show `waiting for WHAT (LIMIT): N s` while the body runs, if it runs long."""
    if console.json or not _is_terminal(console.err):
        yield
        return
    done = threading.Event()
    ticker = threading.Thread(
        target=_tick, args=(console.err, f"waiting for {what} ({limit})", done), daemon=True
    )
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join(timeout=2 * _TICK_S)


def _tick(err: TextIO, text: str, done: threading.Event) -> None:
    if done.wait(SHOW_AFTER_S):
        return
    started = time.monotonic() - SHOW_AFTER_S
    try:
        while True:
            err.write(f"{_ERASE}⏳ {text}: {time.monotonic() - started:.0f} s")
            err.flush()
            if done.wait(_TICK_S):
                break
        err.write(_ERASE)
        err.flush()
    except (OSError, ValueError):  # the terminal went away, or stderr was closed
        return


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False
