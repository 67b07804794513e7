"""The garbage collector's settings for a daemon process (`corral serve` and the benchmarks).

CPython 3.11 runs a young-generation collection every 700 container allocations. corral
allocates a few small tuples per streamed row (rows, events, frames, log entries), most of
which live on in the ring, the stores' queues or the agents: at 40,000+ rows a second that
was a collection every few hundred microseconds, each also walking objects that will not die
for a long time. Measured (BENCHMARKS.md, P1' with the durable store): ~3 us of CPU per row,
about 15% of it. So: collect the young generation every 50,000 allocations and the older ones
more rarely, from the process's start (restoring 10,000 stored agents under the default
thresholds ran six full collections and took 1.4 s instead of 0.8 s), and after start-up move
everything loaded so far (the restored agents, the modules) out of the collector's sight for
good (`gc.freeze`). Cycles are still collected.

Must not: be called by library code or tests (it changes the whole process).
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)


def tune() -> None:
    """Call once, before the daemon starts (restoring its agents allocates a lot)."""
    gc.set_threshold(*THRESHOLDS)


def settle() -> None:
    """Call once, when the daemon has started (after its stores loaded): what is loaded now
    lives as long as the process."""
    gc.set_threshold(*THRESHOLDS)
    gc.freeze()
