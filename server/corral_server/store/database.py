"""The embedded database: one SQLite file in the state directory, one writer thread that group
commits, one reader thread, and the schema migrated at open.

Owns every blocking call into SQLite: none runs on the event loop. The loop hands work to
  * the writer thread: a queue of write jobs; the thread takes every job waiting (up to
    MAX_BATCH_JOBS), runs them in ONE transaction and commits once (one fsync), then settles
    them all on the loop in one callback. Jobs that arrive while a commit is in flight wait
    for the next one: that is the group commit. A job that fails rolls its batch back, and
    the batch is re-run one job per transaction, so only the failing job fails.
  * the reader thread: its own connection, so a page read never waits behind a commit (WAL
    readers see the last commit and never block the writer).
  * the log reader threads (LOG_READERS, own connections, small page caches): the event
    log's catch-up reads (`read(log=True)`), side by side and apart from page reads.
A write job's `on_commit` runs on the loop after its transaction is durable and before any
later job settles: callers publish there (durable first).

Durability (synchronous=FULL, the default). In WAL mode a commit appends to the -wal file;
  * SIGKILL of the daemon: every commit that returned survives with NORMAL or FULL alike
    (the bytes are in the OS page cache before COMMIT returns; the kernel writes them);
  * power loss or a kernel crash: with FULL, every commit that returned survives (the WAL is
    fsynced at each commit); with NORMAL, the last commits before the loss may be rolled
    back (never corrupted).
corral promises that nothing a client was told is lost, so FULL; group commit pays one fsync
per batch, not per row (BENCHMARKS.md has both). NORMAL stays available for tests and benches.

A commit that fails for lack of space fails its whole batch; the writer then empties the
write-ahead log before it tries another, so it writes again once space is freed, without a
restart (store/full_disk.py).

Must not: know tables other than through the schema module and its callers' jobs, or import
protobuf or grpc. Only one daemon opens a state directory at a time (a lock file says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from corral_server.histogram import SECONDS_BOUNDS, Histogram
from corral_server.store.errors import StoreError, StoreUnavailable, StoreWriteFailed, why
from corral_server.store.full_disk import PRAGMAS as _WAL_PRAGMAS
from corral_server.store.full_disk import FullDisk
from corral_server.store.schema import migrate

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL"]

DB_FILE = "corral.db"
LOCK_FILE = "corral.lock"

# At most this many jobs share a transaction: bounds how long one commit holds the writer.
# Stores batch their own writes into one job per commit, so this is rarely reached.
MAX_BATCH_JOBS = 256

# Page cache per connection (negative = KiB): 1 M rows' index and a warm working set fit.
_CACHE_KIB = 64 * 1024

# Log reader threads, and each one's page cache (KiB): sequential scans need little.
LOG_READERS = 2
_LOG_CACHE_KIB = 8 * 1024

# The buckets of `Database.commit_jobs`: how many jobs shared a transaction.
COMMIT_JOBS_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, MAX_BATCH_JOBS)


_ThreadMain = Callable[[asyncio.Future[None], asyncio.Future[None]], None]


class _WriteJob(NamedTuple):
    run: Callable[[sqlite3.Connection], Any]
    on_commit: Callable[[Any], None]
    on_fail: Callable[[BaseException], None]


class _ReadJob(NamedTuple):
    run: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]


class Database:
    """Open with `await Database.open(state_dir)`; close with `await db.close()`."""

    def __init__(self, state_dir: Path, synchronous: Synchronous, lock: bool = True) -> None:
        self.state_dir = state_dir
        # False when the caller already holds the state directory's lock (`corral serve`
        # takes it first, to name the holding pid when it is taken).
        self._lock = lock
        self.path = state_dir / DB_FILE
        self._synchronous = synchronous
        self._loop = asyncio.get_running_loop()
        self._writes: queue.SimpleQueue[_WriteJob | None] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[_ReadJob | None] = queue.SimpleQueue()
        self._log_reads: queue.SimpleQueue[_ReadJob | None] = queue.SimpleQueue()
        # One future per started thread, resolved when it has closed its connection.
        self._threads: list[asyncio.Future[None]] = []
        self._closed = False
        self._closing = False
        self._close_hooks: list[Callable[[], Awaitable[None]]] = []
        self._lock_fd = -1
        # Schema version found at open, before migrating (0 = a new database).
        self.opened_version = 0
        # Transactions committed by the writer thread (written there, read anywhere): how
        # many commits a burst cost, for tests and benches.
        self.commits = 0
        # This store's committed transactions, for the metrics: each one's duration from
        # BEGIN to the end of COMMIT (the fsync included), and how many jobs shared it.
        self.commit_seconds = Histogram(SECONDS_BOUNDS)
        self.commit_jobs = Histogram(COMMIT_JOBS_BOUNDS)
        # Whether commits fail for lack of space, and the way back (the writer thread's).
        self.full_disk = FullDisk(self.path)

    @classmethod
    async def open(
        cls, state_dir: Path, *, synchronous: Synchronous = "FULL", lock: bool = True
    ) -> Database:
        """Create or open the state directory's database and migrate it to SCHEMA_VERSION.
        Raises StoreUnavailable (read-only or unusable directory, not a database, held by
        another daemon) or SchemaTooNew; nothing is left half-written either way."""
        db = cls(state_dir, synchronous, lock)
        await db._start_thread("corral-store-writer", db._writer_main)
        await db._start_thread(
            "corral-store-reader", partial(db._reader_main, db._reads, _CACHE_KIB)
        )
        for number in range(LOG_READERS):
            reader = partial(db._reader_main, db._log_reads, _LOG_CACHE_KIB)
            await db._start_thread(f"corral-store-log-reader-{number}", reader)
        return db

    async def _start_thread(self, name: str, main: _ThreadMain) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()
        done: asyncio.Future[None] = self._loop.create_future()
        self._threads.append(done)
        threading.Thread(target=main, args=(ready, done), name=name, daemon=True).start()
        try:
            await ready
        except BaseException:
            await self._stop()
            raise

    def submit(
        self,
        run: Callable[[sqlite3.Connection], T],
        on_commit: Callable[[T], None],
        on_fail: Callable[[BaseException], None],
    ) -> None:
        """Queue a write. `run` executes in the writer thread inside a transaction it shares
        with other jobs; it must not commit. Exactly one of `on_commit(result)` (after the
        commit is durable) and `on_fail(error)` later runs on the loop, in submission order.
        Errors from SQLite arrive as StoreWriteFailed, others as raised."""
        if self._closed:
            raise StoreUnavailable(self.path, "the store is closed")
        self._writes.put(_WriteJob(run, on_commit, on_fail))

    async def write(self, run: Callable[[sqlite3.Connection], T]) -> T:
        """`submit` as a coroutine: the result once committed."""
        future: asyncio.Future[T] = self._loop.create_future()
        self.submit(run, _resolver(future), _failer(future))
        return await future

    async def read(self, run: Callable[[sqlite3.Connection], T], *, log: bool = False) -> T:
        """Run `run` in the reader thread (`log`: in a log reader thread) and return its
        result. Each call sees the database as of the last commit when its statements start;
        to read several statements from one snapshot, `run` wraps them in BEGIN ... COMMIT.
        Errors from SQLite arrive as StoreError, others as raised."""
        if self._closed:
            raise StoreUnavailable(self.path, "the store is closed")
        future: asyncio.Future[T] = self._loop.create_future()
        (self._log_reads if log else self._reads).put(_ReadJob(run, future))
        return await future

    def on_close(self, hook: Callable[[], Awaitable[None]]) -> None:
        """`await hook()` runs first when the database closes (while it still takes writes):
        the group commit hands over what its stores still hold there."""
        self._close_hooks.append(hook)

    async def close(self) -> None:
        """Commit every write already submitted (and, through the close hooks, every write
        the stores still hold), then stop both threads and close the file. Idempotent."""
        if self._closed or self._closing:
            return
        self._closing = True
        for hook in self._close_hooks:
            await hook()
        self._closed = True
        await self._stop()

    async def _stop(self) -> None:
        self._closed = True
        self._reads.put(None)
        for _ in range(LOG_READERS):
            self._log_reads.put(None)
        self._writes.put(None)
        for done in self._threads:
            await done

    # --- the writer thread ---------------------------------------------------------------

    def _writer_main(self, ready: asyncio.Future[None], done: asyncio.Future[None]) -> None:
        try:
            conn = self._open_writer()
        except BaseException as exc:
            self._release_lock()
            self._settle_thread(ready, exc)
            self._settle_thread(done, None)
            return
        self._settle_thread(ready, None)
        try:
            self._write_loop(conn)
        finally:
            conn.close()
            self._release_lock()
            self._settle_thread(done, None)

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        jobs = self._writes
        while True:
            job = jobs.get()
            if job is None:
                return
            batch = [job]
            stop = False
            while len(batch) < MAX_BATCH_JOBS:
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            outcomes = self._commit(conn, batch)
            self._loop.call_soon_threadsafe(_settle_writes, batch, outcomes)
            if stop:
                return

    def _commit(self, conn: sqlite3.Connection, batch: list[_WriteJob]) -> list[_Outcome]:
        if (refused := self.full_disk.refusal(conn)) is not None:
            return [_Outcome(False, refused)] * len(batch)
        started = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            results = [job.run(conn) for job in batch]
            conn.execute("COMMIT")
            self.commits += 1
            self.commit_seconds.add(time.perf_counter() - started)
            self.commit_jobs.add(len(batch))
        except Exception as exc:
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            if self.full_disk.failed(exc):  # nobody's fault: the whole batch fails alike
                return [_Outcome(False, StoreWriteFailed(self.path, str(exc)))] * len(batch)
            if len(batch) > 1:  # find the culprit: every job alone, in its own transaction
                return [self._commit(conn, [job])[0] for job in batch]
            error = StoreWriteFailed(self.path, str(exc)) if _is_sqlite(exc) else exc
            return [_Outcome(False, error)]
        self.full_disk.committed()
        return [_Outcome(True, result) for result in results]

    def _open_writer(self) -> sqlite3.Connection:
        if self._lock:
            self._take_lock()
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, cached_statements=256)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailable(self.path, f"cannot switch to WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            for pragma in _WAL_PRAGMAS:
                conn.execute(pragma)
            self.opened_version = migrate(conn, self.path)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailable(self.path, why(exc)) from None
            raise
        return conn

    def _take_lock(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                self.path, f"cannot create the state directory: {exc.strerror or exc}"
            ) from None
        lock_path = self.state_dir / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreUnavailable(
                self.path,
                f"cannot create {lock_path.name}: {exc.strerror or exc} "
                "(is the state directory writable?)",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreUnavailable(
                self.path, "another corral daemon is using this state directory"
            ) from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = -1

    # --- the reader threads --------------------------------------------------------------

    def _reader_main(
        self,
        jobs: queue.SimpleQueue[_ReadJob | None],
        cache_kib: int,
        ready: asyncio.Future[None],
        done: asyncio.Future[None],
    ) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, cached_statements=256)
            conn.execute("PRAGMA query_only=1")
            conn.execute(f"PRAGMA cache_size=-{cache_kib}")
        except sqlite3.Error as exc:
            self._settle_thread(ready, StoreUnavailable(self.path, why(exc)))
            self._settle_thread(done, None)
            return
        self._settle_thread(ready, None)
        try:
            while (job := jobs.get()) is not None:
                try:
                    result = job.run(conn)
                except Exception as exc:
                    with contextlib.suppress(sqlite3.Error):
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                    error = StoreError(f"the store {self.path} could not be read: {exc}")
                    self._settle_thread(job.future, error if _is_sqlite(exc) else exc)
                else:
                    self._loop.call_soon_threadsafe(_set_result, job.future, result)
        finally:
            conn.close()
            self._settle_thread(done, None)

    # --- hand-offs to the loop -----------------------------------------------------------

    def _settle_thread(self, future: asyncio.Future[Any], error: BaseException | None) -> None:
        if error is None:
            self._loop.call_soon_threadsafe(_set_result, future, None)
        else:
            self._loop.call_soon_threadsafe(_set_exception, future, error)


class _Outcome(NamedTuple):
    ok: bool
    value: Any


def _settle_writes(batch: list[_WriteJob], outcomes: list[_Outcome]) -> None:
    for job, outcome in zip(batch, outcomes, strict=True):
        if outcome.ok:
            job.on_commit(outcome.value)
        else:
            job.on_fail(outcome.value)


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _resolver(future: asyncio.Future[T]) -> Callable[[T], None]:
    return lambda value: _set_result(future, value)


def _failer(future: asyncio.Future[Any]) -> Callable[[BaseException], None]:
    return lambda error: _set_exception(future, error)


def _is_sqlite(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error)
