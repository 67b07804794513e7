"""The writer thread's way back from a full disk, without a restart.

Until a checkpoint copies them into corral.db, the pages in the write-ahead log (corral.db-wal)
take their space twice. A large log can leave too little room to ever checkpoint it, and every
commit appended to it meanwhile eats the space someone frees: the daemon stays stuck. So:

  * the log stays small: checkpointed once it holds WAL_AUTOCHECKPOINT_PAGES, and cut back to
    WAL_SIZE_LIMIT bytes when it starts over (a large transaction's growth is given back);
  * after a commit fails for lack of space (SQLITE_FULL) or an I/O error (SQLite does not say
    which errno: ENOSPC on a sync or a resize, EFBIG past a file size limit), every later batch
    first runs `wal_checkpoint(TRUNCATE)`, and is tried only once that has emptied the log: it
    fails at once while there is no room for the checkpoint, so freed space goes to the
    checkpoint first, and the first batch after it has room;
  * the failed transaction left nothing: SQLite rolled it back (the writer makes sure), and the
    frames it wrote past the log's last commit are never read, then dropped by the truncation.

Nothing here retries or waits: the callers retry (the event log on the daemon's clock, 50 ms
doubling to 5 s), and so does the next client write. `writable` and `failures` are read by the
metrics; the first failure and the recovery are logged once each.

Must not: run anywhere but the writer thread (the metrics only read the two attributes).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from corral_server.store.errors import StoreWriteFailed

log = logging.getLogger(__name__)

# The log is checkpointed once it holds this many pages (4 KiB each; SQLite's default is
# 1,000), and cut back to WAL_SIZE_LIMIT bytes when it starts over: on a full disk about this
# much, plus the last transaction, needs room to move into corral.db.
WAL_AUTOCHECKPOINT_PAGES = 256
WAL_SIZE_LIMIT = 1 << 20

PRAGMAS = (
    f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}",
    f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}",
)


class FullDisk:
    """One per database, used by its writer thread around each transaction."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._wal = Path(f"{path}-wal")
        # False from a commit that failed for lack of space (or an I/O error) until one
        # succeeds again; how many transactions (and checkpoints before them) failed so.
        self.writable = True
        self.failures = 0
        self._since = 0.0

    def wal_bytes(self) -> int:
        try:
            return self._wal.stat().st_size
        except OSError:
            return 0

    def refusal(self, conn: sqlite3.Connection) -> StoreWriteFailed | None:
        """Before a batch: None to go on, or the error to fail it with at once (there is
        still no room to empty the log)."""
        if self.writable:
            return None
        size = self.wal_bytes()
        try:
            if conn.in_transaction:  # a rollback that failed: nothing can begin before it
                conn.execute("ROLLBACK")
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as exc:
            self.failures += 1
            return StoreWriteFailed(
                self._path, f"{exc} (its {size}-byte write-ahead log cannot be checkpointed)"
            )
        if busy:  # a reader still holds the log: not a lack of space, so write anyway
            log.info("store %s: write-ahead log busy, %d bytes kept", self._path, size)
        else:
            log.info("store %s: write-ahead log checkpointed and truncated", self._path)
        return None

    def failed(self, exc: BaseException) -> bool:
        """After a failed (and rolled back) transaction: whether it failed for lack of space
        or an I/O error, which fails its whole batch (no job is to blame)."""
        code = getattr(exc, "sqlite_errorcode", None)
        if not isinstance(code, int) or code & 0xFF not in (
            sqlite3.SQLITE_FULL,
            sqlite3.SQLITE_IOERR,
        ):
            return False
        self.failures += 1
        if self.writable:
            self.writable = False
            self._since = time.monotonic()
            log.error(
                "store %s: a commit failed (%s); writes fail until there is room to checkpoint "
                "its %d-byte write-ahead log (reads and streams go on)",
                self._path,
                exc,
                self.wal_bytes(),
            )
        return True

    def committed(self) -> None:
        if not self.writable:
            self.writable = True
            log.warning(
                "store %s: commits succeed again, %.1fs after the first failure (%d failed)",
                self._path,
                time.monotonic() - self._since,
                self.failures,
            )
