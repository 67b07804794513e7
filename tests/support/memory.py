"""Resident memory of a process, for tests and benches that bound what the daemon holds."""

from __future__ import annotations


def rss_mb(pid: int) -> float:
    """VmRSS of process `pid` in MB (from /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
