"""Memory freed after a large request goes back to the system, not only to the allocator.

A decoded request of a few MB (millions of small repeated elements) leaves the daemon once it
is answered, but glibc keeps the pages it came from: 40 refused 5 MB requests left an idle
daemon at 1.6x its idle size for good. Two things bring it back (measured with `corral serve`,
idle 58 MB: 92 MB with neither, 73 MB with the first alone, 58 MB with both):

- `tune_allocator` fixes glibc's mmap threshold at MMAP_THRESHOLD_BYTES. By default the
  threshold rises to the largest block freed so far, so once one large block was freed, the
  next ones come from the heap and leave holes there; fixed, a large block is always a mapping
  of its own and goes back to the system when freed.
- `Reclaimer` runs `malloc_trim(0)`, which returns the free pages of every arena, after a large
  request. It takes a few milliseconds on a large heap and holds the allocator's locks, so it
  runs in a thread, at most once per interval (a flood of large requests trims once an
  interval, not once a request).

Must not: collect garbage (a full collection of a daemon with many agents blocks the loop for
much longer, and the request paths do not leave cycles behind), or run more than once per
interval.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

from corral_server.clock import Clock, SystemClock, TimerHandle

log = logging.getLogger(__name__)

# A request this large is worth a trim once it is answered (the allocator reuses smaller
# frees on its own; a trim costs a few ms).
LARGE_REQUEST_BYTES = 1 << 20
INTERVAL_S = 1.0
# How long after the answer the trim waits: grpc frees the decoded request only once the
# answer has been sent, a moment after the handler returns.
SETTLE_S = 0.25


# Blocks at least this large are mappings of their own (glibc's default starts at 128 KiB and
# rises with what is freed, up to 32 MiB). Above the hub's 1 MiB batches, so joining a batch
# stays a heap allocation.
MMAP_THRESHOLD_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold (see the module docstring); False where there is no glibc.
    Process-wide: for `corral serve`, not for library code or tests."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim, or None where there is none (musl, macOS)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class Reclaimer:
    """Call `after_large_request` when a large request has been answered."""

    def __init__(self, clock: Clock | None = None, interval_s: float = INTERVAL_S) -> None:
        self._clock: Clock = clock or SystemClock()
        self._interval_s = interval_s
        self._trim = _malloc_trim()
        self._last_ms = -1 << 62
        self._timer: TimerHandle | None = None
        self.trims = 0  # trims started (tests)

    def after_large_request(self) -> None:
        if self._trim is None or self._timer is not None:
            return
        wait_s = (self._last_ms - self._clock.now_ms()) / 1000 + self._interval_s
        self._timer = self._clock.call_later(max(SETTLE_S, wait_s), self._start)

    def _start(self) -> None:
        self._timer = None
        self._last_ms = self._clock.now_ms()
        self.trims += 1
        trim = self._trim
        assert trim is not None
        task = asyncio.get_running_loop().run_in_executor(None, trim)
        task.add_done_callback(_log_failure)


def _log_failure(future: asyncio.Future[object]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("malloc_trim failed: %s", future.exception())
