"""A real small filesystem for full-disk tests: a tmpfs of a few MiB, mounted for one test and
unmounted after it. Mounting needs root (the suite runs as root in CI); elsewhere the tests
that use it are skipped, saying why."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a tmpfs needs root (the suite runs as root in CI)"
)


@contextlib.contextmanager
def small_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """`mount` (created) as a tmpfs of `size` ("8m"), only its owner allowed in."""
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        check=True,
        capture_output=True,
    )
    try:
        yield mount
    finally:
        # A file still open (a test that failed half-way) must not leave the mount behind.
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill(path: Path, size: int) -> None:
    """A filler file of `size` bytes, really allocated (zeros are written, not a hole)."""
    with path.open("wb") as out:
        out.write(b"\0" * size)
