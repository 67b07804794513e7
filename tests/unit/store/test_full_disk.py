"""store/full_disk.py on a real 4 MiB tmpfs: once a commit fails for lack of space, a write is
refused at once (leaving the write-ahead log as it is) while the log cannot be checkpointed, and
the first write after space is freed empties and truncates the log, then commits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral_server.store.database import Database
from corral_server.store.errors import StoreWriteFailed
from corral_server.store.full_disk import WAL_SIZE_LIMIT
from corral_server.store.meta import read_meta, write_meta
from tests.support.small_disk import fill, needs_root, small_tmpfs

pytestmark = needs_root

VALUE = "x" * 100_000
FILLER_BYTES = 3 << 19  # 1.5 MiB: more than the log holds when a commit fails


@pytest.fixture
async def small_disk(tmp_path: Path) -> AsyncIterator[Path]:
    with small_tmpfs(tmp_path / "disk", "4m") as mount:
        yield mount


async def test_the_log_is_emptied_before_the_first_write_once_space_is_freed(
    small_disk: Path,
) -> None:
    filler = small_disk / "filler"
    fill(filler, FILLER_BYTES)
    db = await Database.open(small_disk / "state")
    try:
        kept: list[str] = []
        with pytest.raises(StoreWriteFailed, match="full") as failed:
            for n in range(100):
                await write_meta(db, f"k{n}", VALUE)
                kept.append(f"k{n}")
        assert str(db.path) in str(failed.value)
        assert not db.full_disk.writable and db.full_disk.failures == 1
        wal = db.full_disk.wal_bytes()
        assert 0 < wal <= WAL_SIZE_LIMIT + 2 * len(VALUE)
        # No room to checkpoint: refused before it is tried, so the log grows no further.
        with pytest.raises(StoreWriteFailed, match="cannot be checkpointed"):
            await write_meta(db, "small", "v")
        assert db.full_disk.wal_bytes() == wal
        assert db.full_disk.failures == 2

        filler.unlink()
        await write_meta(db, "small", "v")
        assert db.full_disk.writable
        assert db.full_disk.wal_bytes() < 64 * 1024  # truncated, then one small commit
        assert await read_meta(db, "small") == "v"
        for key in kept:
            assert await read_meta(db, key) == VALUE
        check = await db.read(lambda conn: conn.execute("PRAGMA integrity_check").fetchall())
        assert check == [("ok",)]
    finally:
        await db.close()
