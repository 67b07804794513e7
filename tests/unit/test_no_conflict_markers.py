"""No tracked file keeps a merge's conflict markers (a Markdown file passes every other check
with them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(rb"^(<{7} |>{7} |={7}$)", re.MULTILINE)


def test_no_tracked_file_has_conflict_markers() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    hits = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path.stat().st_size > 4_000_000:
            continue
        data = path.read_bytes()
        if b"\0" not in data[:4096] and MARKER.search(data):
            hits.append(name)
    assert hits == []
